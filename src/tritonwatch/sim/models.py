"""The model set: which models the simulator serves, how they cost, and on which GPUs.

A model set is YAML (``--models FILE``) validated into frozen pydantic objects, so a
mistake fails at start with the field path and the value named. Triton-facing fields use
Triton's own names (``max_batch_size``, ``dynamic_batching``, ``instance_group``,
``input``/``output`` with ``data_type`` and ``dims``) so a user can copy them from a
``config.pbtxt``; the cost model (``timing``, ``gpu_occupancy``, ``memory_per_instance``)
is the simulator's own. Durations accept ``250us``, ``2ms``, ``0.5s`` or a number of
microseconds; sizes accept ``512MiB``, ``2GB`` or a number of bytes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal, get_args

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from tritonwatch.sim.model_kinds import (
    EnsembleSchedulingSpec,
    SequenceBatchingSpec,
    check_batch_sizes,
    resolve_steps,
)

DataType = Literal[
    "TYPE_BOOL",
    "TYPE_UINT8",
    "TYPE_UINT16",
    "TYPE_UINT32",
    "TYPE_UINT64",
    "TYPE_INT8",
    "TYPE_INT16",
    "TYPE_INT32",
    "TYPE_INT64",
    "TYPE_FP16",
    "TYPE_FP32",
    "TYPE_FP64",
    "TYPE_STRING",
]
DATA_TYPES: tuple[str, ...] = get_args(DataType)

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(us|µs|ms|s)?\s*$")
_DURATION_UNIT_US = {None: 1.0, "us": 1.0, "µs": 1.0, "ms": 1e3, "s": 1e6}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(B|KB|MB|GB|KiB|MiB|GiB)?\s*$")
_SIZE_UNIT = {
    None: 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
}


def _to_microseconds(value: object) -> object:
    """Reads ``250us`` / ``2ms`` / ``0.5s`` / a bare number (µs) as microseconds."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match is None:
            raise ValueError(f"must be a duration like 250us, 2ms or 0.5s, got: {value!r}")
        return float(match.group(1)) * _DURATION_UNIT_US[match.group(2)]
    return value


def _to_bytes(value: object) -> object:
    """Reads ``512MiB`` / ``2GB`` / a bare number as bytes."""
    if isinstance(value, str):
        match = _SIZE.match(value)
        if match is None:
            raise ValueError(f"must be a size like 512MiB or 2GB, got: {value!r}")
        return int(float(match.group(1)) * _SIZE_UNIT[match.group(2)])
    return value


Microseconds = Annotated[float, BeforeValidator(_to_microseconds), Field(ge=0)]
Bytes = Annotated[int, BeforeValidator(_to_bytes), Field(ge=0)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TensorSpec(_Frozen):
    """One input or output, as in ``config.pbtxt`` (``dims`` exclude the batch dimension)."""

    name: str = Field(min_length=1)
    data_type: DataType
    dims: tuple[Annotated[int, Field(ge=1)], ...] = Field(min_length=1)


class DynamicBatchingSpec(_Frozen):
    """Triton's ``dynamic_batching`` block (the fields the simulator acts on)."""

    preferred_batch_size: tuple[Annotated[int, Field(ge=1)], ...] = ()
    max_queue_delay_microseconds: int = Field(default=0, ge=0)


class InstanceGroupSpec(_Frozen):
    """Triton's ``instance_group``: ``count`` instances on each listed GPU (or on the CPU)."""

    name: str | None = Field(default=None, min_length=1)
    """As Triton names it: ``<model>_0`` unless given. A ``config.pbtxt`` without any
    ``instance_group`` gets one named after the model: write ``name: <model>`` for that."""
    count: int = Field(default=1, ge=1)
    kind: Literal["KIND_GPU", "KIND_CPU"] = "KIND_GPU"
    gpus: tuple[Annotated[int, Field(ge=0)], ...] = (0,)


class TimingSpec(_Frozen):
    """Service time of one execution of a batch of ``n``: ``stage = base + per_item × n``.

    ``compute_infer`` runs on the instance's GPU (shared with every other instance there)
    and is multiplied by log-normal noise of the given sigma (mean 1); the input and
    output stages are host-side copies and are not shared.
    """

    compute_input: Microseconds = 20.0
    compute_input_per_item: Microseconds = 2.0
    compute_infer: Microseconds = 1000.0
    compute_infer_per_item: Microseconds = 50.0
    compute_output: Microseconds = 10.0
    compute_output_per_item: Microseconds = 1.0
    noise_sigma: float = Field(default=0.05, ge=0.0, le=2.0)
    network_delay: Microseconds = 0.0
    """Added before the response is sent, outside every server-side timer."""


class OccupancySpec(_Frozen):
    """Fraction of the GPU one execution keeps busy: ``min(1, base + per_item × n)``."""

    base: float = Field(default=0.3, gt=0.0, le=1.0)
    per_item: float = Field(default=0.02, ge=0.0, le=1.0)


class LlmSpec(_Frozen):
    """A generative model served by continuous batching (``sim/llm_engine.py``).

    One engine step prefills the prompts admitted in it (``prefill_per_token`` each) and
    then makes one token for every running sequence (``decode_step_base +
    decode_step_per_seq × running``), as TensorRT-LLM's inflight batcher and vLLM do. A
    sequence holds one KV-cache block per ``tokens_per_block`` tokens; when the pool runs
    dry the newest running sequence is preempted back to waiting (recomputed later).
    """

    backend: Literal["tensorrt_llm", "vllm", "python"] = "tensorrt_llm"
    """Which backend's metric families ``/metrics`` prints for the model (``python``: a
    decoupled Python-backend model, which prints none)."""
    text_input: str = "text_input"
    """The BYTES input holding the prompt."""
    max_tokens_input: str = "max_tokens"
    """The optional integer input bounding the tokens generated."""
    text_output: str = "text_output"
    """The BYTES output carrying each token."""
    prefill_per_token: Microseconds = 150.0
    decode_step_base: Microseconds = 8000.0
    decode_step_per_seq: Microseconds = 150.0
    max_num_seqs: int = Field(default=64, ge=1)
    kv_blocks: int = Field(default=4096, ge=1)
    tokens_per_block: int = Field(default=16, ge=1)
    prompt_tokens_per_word: float = Field(default=1.3, gt=0.0)
    default_max_tokens: int = Field(default=16, ge=1)
    """Tokens generated when a request names no ``max_tokens``."""
    final_flag_only: bool = False
    """Send the FINAL flag as a response of its own after the last token, as a Python-
    backend model does (tests/triton_models/streaming); TensorRT-LLM and vLLM send it
    with the last token."""


LLM_INPUTS = (
    TensorSpec(name="text_input", data_type="TYPE_STRING", dims=(1,)),
    TensorSpec(name="max_tokens", data_type="TYPE_INT32", dims=(1,)),
    TensorSpec(name="stream", data_type="TYPE_BOOL", dims=(1,)),
)
"""The TensorRT-LLM ensemble's names (vLLM's backend shares text_input and stream)."""
LLM_OUTPUTS = (TensorSpec(name="text_output", data_type="TYPE_STRING", dims=(1,)),)


class ModelSpec(_Frozen):
    """One simulated model: its Triton configuration and its cost model."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    version: int = Field(default=1, ge=1)
    platform: str = ""
    backend: str = "python"
    max_batch_size: int = Field(default=8, ge=0)
    dynamic_batching: DynamicBatchingSpec | None = None
    instance_group: InstanceGroupSpec = InstanceGroupSpec()
    input: tuple[TensorSpec, ...] = Field(min_length=1)
    output: tuple[TensorSpec, ...] = Field(min_length=1)
    compute: Literal["add_sub", "identity", "zeros"] = "zeros"
    """What the outputs hold: ``add_sub`` (OUTPUT0 = IN0 + IN1, OUTPUT1 = IN0 − IN1, like
    Triton's ``simple`` example), ``identity`` (output i = input i) or ``zeros``."""
    timing: TimingSpec = TimingSpec()
    gpu_occupancy: OccupancySpec = OccupancySpec()
    memory_per_instance: Bytes = 512 * 2**20
    parameters: dict[str, str] = Field(default_factory=dict)
    """The config's ``parameters`` (each a ``string_value``), shown in the configuration
    as Triton shows a backend's parameters; the simulator itself does not read them."""
    ensemble_scheduling: EnsembleSchedulingSpec | None = None
    """An ensemble (``platform: ensemble``): its steps run in order, each through its own
    model's batcher (``sim/model_kinds.py``; ``ensemble: [a, b]`` is the short form)."""
    sequence_batching: SequenceBatchingSpec | None = None
    """A stateful model: requests carry a correlation id, START on a sequence's first."""
    response_cache: bool = False
    """Triton's ``response_cache {enable: true}`` (``{enable: true}`` is accepted too):
    identical requests are answered from the server's cache when it has one."""
    llm: LlmSpec | None = None
    """A generative model: decoupled (``model_transaction_policy { decoupled: true }``),
    served token by token over generate_stream, OpenAI and ModelStreamInfer. Its inputs
    and outputs default to text_input/max_tokens/stream → text_output, its backend to
    ``llm.backend``."""

    @model_validator(mode="before")
    @classmethod
    def _fill_kind_defaults(cls, data: object) -> object:
        """The short forms: ``ensemble: [names]`` (platform ``ensemble``, no backend) and
        ``response_cache: {enable: bool}``."""
        if not isinstance(data, dict):
            return data
        filled = dict(data)
        if "ensemble" in filled:
            filled.setdefault("ensemble_scheduling", {"step": filled.pop("ensemble")})
        if filled.get("ensemble_scheduling") is not None:
            filled.setdefault("platform", "ensemble")
            filled.setdefault("backend", "")
            # no instances of its own: nothing of it lands on a GPU
            filled.setdefault("instance_group", {"kind": "KIND_CPU"})
        cache = filled.get("response_cache")
        if isinstance(cache, dict) and set(cache) <= {"enable"}:
            filled["response_cache"] = cache.get("enable", False)
        return filled

    @model_validator(mode="before")
    @classmethod
    def _fill_llm_defaults(cls, data: object) -> object:
        if not isinstance(data, dict) or not isinstance(data.get("llm"), dict | LlmSpec):
            return data
        llm = data["llm"]
        backend = llm.backend if isinstance(llm, LlmSpec) else llm.get("backend", "tensorrt_llm")
        filled = dict(data)
        filled.setdefault("backend", backend)
        filled.setdefault("input", LLM_INPUTS)
        filled.setdefault("output", LLM_OUTPUTS)
        return filled

    @property
    def decoupled(self) -> bool:
        """Whether the model answers with many responses (``model_transaction_policy``)."""
        return self.llm is not None

    @property
    def is_ensemble(self) -> bool:
        """Whether the model is an ensemble of other models' steps."""
        return self.ensemble_scheduling is not None

    @property
    def batch_rule(self) -> DynamicBatchingSpec | None:
        """The batch-forming rule the model's batcher applies: ``dynamic_batching``, or a
        sequence batcher's (direct: whatever slots are ready after its queue delay;
        oldest: its preferred sizes and delay); None runs each request alone."""
        if self.max_batch_size == 0:
            return None
        sequences = self.sequence_batching
        if sequences is None:
            return self.dynamic_batching
        if sequences.oldest is not None:
            return DynamicBatchingSpec(
                preferred_batch_size=sequences.oldest.preferred_batch_size,
                max_queue_delay_microseconds=sequences.oldest.max_queue_delay_microseconds,
            )
        direct = sequences.direct
        delay = 0 if direct is None else direct.max_queue_delay_microseconds
        return DynamicBatchingSpec(max_queue_delay_microseconds=delay)

    @model_validator(mode="after")
    def _check_consistency(self) -> ModelSpec:
        batching = self.dynamic_batching
        if batching is not None:  # with max_batch_size 0 it runs every request alone
            too_big = [size for size in batching.preferred_batch_size if size > self.max_batch_size]
            if too_big:
                raise ValueError(
                    f"preferred_batch_size must not exceed max_batch_size "
                    f"{self.max_batch_size}, got: {list(too_big)}"
                )
        for kind, tensors in (("input", self.input), ("output", self.output)):
            names = [tensor.name for tensor in tensors]
            if len(set(names)) != len(names):
                raise ValueError(f"{kind} names must be unique, got: {names}")
        self._check_compute()
        self._check_kinds()
        if self.llm is not None:
            for kind, tensors, name in (
                ("input", self.input, self.llm.text_input),
                ("output", self.output, self.llm.text_output),
            ):
                if name not in {t.name for t in tensors}:
                    raise ValueError(f"an llm model needs the {kind} {name!r}")
        return self

    def _check_kinds(self) -> None:
        kinds = [
            kind
            for kind, present in (
                ("ensemble_scheduling", self.ensemble_scheduling is not None),
                ("sequence_batching", self.sequence_batching is not None),
                ("dynamic_batching", self.dynamic_batching is not None),
                ("llm", self.llm is not None),
            )
            if present
        ]
        if len(kinds) > 1:
            raise ValueError(f"a model takes one of {kinds}, not several")
        if self.ensemble_scheduling is not None and self.platform != "ensemble":
            raise ValueError(f"an ensemble's platform is 'ensemble', got: {self.platform!r}")
        if self.response_cache and (self.is_ensemble or self.decoupled):
            raise ValueError("response_cache is simulated for plain (non-ensemble) models only")

    def _check_compute(self) -> None:
        if self.is_ensemble:  # its outputs are its steps'
            return
        if self.compute == "add_sub":
            shapes = {(t.data_type, t.dims) for t in (*self.input, *self.output)}
            if len(self.input) != 2 or len(self.output) != 2 or len(shapes) != 1:
                raise ValueError(
                    "compute add_sub needs 2 inputs and 2 outputs of one data_type and dims"
                )
            if "TYPE_STRING" in {t.data_type for t in self.input} or self.input[0].data_type == (
                "TYPE_BOOL"
            ):
                raise ValueError("compute add_sub needs a numeric data_type")
        if self.compute == "identity":
            pairs = zip(self.input, self.output, strict=False)
            if len(self.input) != len(self.output) or any(
                (i.data_type, i.dims) != (o.data_type, o.dims) for i, o in pairs
            ):
                raise ValueError(
                    "compute identity needs one output per input with the same data_type and dims"
                )

    @property
    def version_label(self) -> str:
        """The version as Triton prints it in URLs, metadata and metric labels."""
        return str(self.version)


class GpuSpec(_Frozen):
    """One simulated GPU, reported under ``gpu_uuid`` in ``/metrics``."""

    uuid: str = Field(pattern=r"^GPU-[0-9a-fA-F-]+$")
    name: str = "NVIDIA H200 (simulated)"
    memory_total: Bytes = 150_754_820_096
    memory_base: Bytes = 644_939_776
    """Used before any model loads (driver and context reservations)."""
    power_idle_watts: float = Field(default=80.0, ge=0.0)
    power_limit_watts: float = Field(default=700.0, gt=0.0)

    @model_validator(mode="after")
    def _check_ranges(self) -> GpuSpec:
        if self.memory_base > self.memory_total:
            raise ValueError(
                f"memory_base must not exceed memory_total {self.memory_total}, "
                f"got: {self.memory_base}"
            )
        if self.power_idle_watts > self.power_limit_watts:
            raise ValueError(
                f"power_idle_watts must not exceed power_limit_watts {self.power_limit_watts}, "
                f"got: {self.power_idle_watts}"
            )
        return self


class ModelSet(_Frozen):
    """The whole YAML file: GPUs, then models placed on them by index."""

    gpus: tuple[GpuSpec, ...] = Field(min_length=1)
    models: tuple[ModelSpec, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _check_references(self) -> ModelSet:
        names = [model.name for model in self.models]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"model names must be unique, got duplicates: {duplicates}")
        uuids = [gpu.uuid for gpu in self.gpus]
        if len(set(uuids)) != len(uuids):
            raise ValueError(f"gpu uuids must be unique, got: {uuids}")
        for model in self.models:
            group = model.instance_group
            missing = [index for index in group.gpus if index >= len(self.gpus)]
            if group.kind == "KIND_GPU" and missing:
                raise ValueError(
                    f"model {model.name!r}: instance_group.gpus must index the "
                    f"{len(self.gpus)} gpus, got: {list(missing)}"
                )
        self._check_ensembles()
        return self

    def _check_ensembles(self) -> None:
        for model in self.models:
            if model.ensemble_scheduling is None:
                continue
            try:
                resolve_steps(model, self.model)
                check_batch_sizes(model, self.model)
            except ValueError as error:
                raise ValueError(f"model {model.name!r}: ensemble_scheduling: {error}") from None
            self._check_acyclic(model, (model.name,))

    def _check_acyclic(self, ensemble: ModelSpec, path: tuple[str, ...]) -> None:
        assert ensemble.ensemble_scheduling is not None
        for step in ensemble.ensemble_scheduling.step:
            inner = self.model(step.model_name)
            if inner is None or inner.ensemble_scheduling is None:
                continue
            if inner.name in path:
                cycle = " -> ".join((*path, inner.name))
                raise ValueError(f"ensembles must not nest in a cycle: {cycle}")
            self._check_acyclic(inner, (*path, inner.name))

    def model(self, name: str) -> ModelSpec | None:
        """Returns the model called ``name``, or None."""
        return next((model for model in self.models if model.name == name), None)


class ModelSetError(ValueError):
    """A model-set file could not be read or failed validation."""


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        if isinstance(item["input"], dict | list):  # a whole block: the message names the value
            lines.append(f"{path}: {message}")
        else:
            lines.append(f"{path}: {message} (got: {item['input']!r})")
    return "; ".join(lines)


def parse_model_set(data: object, *, source: str = "<model set>") -> ModelSet:
    """Validates already-parsed YAML/JSON data into a model set.

    Raises:
        ModelSetError: naming the source, the field path and the offending value.
    """
    try:
        return ModelSet.model_validate(data)
    except ValidationError as error:
        raise ModelSetError(f"{source}: {_describe(error)}") from None


def load_model_set(path: str | Path) -> ModelSet:
    """Reads and validates a model-set YAML file.

    Raises:
        ModelSetError: the file is missing, is not YAML, or fails validation.
    """
    file = Path(path)
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as error:
        raise ModelSetError(f"{file}: cannot read model set: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ModelSetError(f"{file}: not valid YAML: {error}") from None
    return parse_model_set(data, source=str(file))
