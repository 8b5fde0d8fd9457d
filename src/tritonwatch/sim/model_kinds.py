"""The model-set blocks of the three special kinds: ensembles, stateful models, caching.

Each block uses Triton's own field names so that a user can copy it from a
``config.pbtxt``:

* ``ensemble_scheduling: {step: [...]}`` (or the short ``ensemble: [prep, core, post]``)
  makes an ensemble (``platform: ensemble``): each step names another model of the set.
  A step given as a bare name, or without maps, is chained: the first step reads the
  ensemble's inputs, each later step the previous step's outputs (by position), and the
  last step writes the ensemble's outputs.
* ``sequence_batching`` makes a stateful model: ``direct`` (the default) or ``oldest``,
  ``max_sequence_idle_microseconds`` (1 s by default) and ``control_input`` entries (one
  control each), printed in the configuration as Triton prints them.
* ``response_cache: true`` enables the model's response cache (Triton's
  ``response_cache {enable: true}``); it caches only when the server's cache is on.

``resolve_steps`` fills the chained maps against the other models and checks that every
tensor an ensemble names exists with the data type its consumer expects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal, Protocol

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _step_from_name(value: object) -> object:
    """A bare model name is a chained step."""
    return {"model_name": value} if isinstance(value, str) else value


class EnsembleStepSpec(_Frozen):
    """One ``ensemble_scheduling.step``: a model and how tensors flow in and out of it."""

    model_name: str = Field(min_length=1)
    model_version: int = Field(default=-1, ge=-1)
    """-1: the model's latest (its only) version, as Triton's configs usually say."""
    input_map: dict[str, str] = Field(default_factory=dict)
    """The step model's input name → the ensemble tensor it reads (empty: chained)."""
    output_map: dict[str, str] = Field(default_factory=dict)
    """The step model's output name → the ensemble tensor it writes (empty: chained)."""


EnsembleStep = Annotated[EnsembleStepSpec, BeforeValidator(_step_from_name)]


class EnsembleSchedulingSpec(_Frozen):
    """Triton's ``ensemble_scheduling``: the steps, run in order."""

    step: tuple[EnsembleStep, ...] = Field(min_length=1)


ControlKind = Literal[
    "CONTROL_SEQUENCE_START",
    "CONTROL_SEQUENCE_READY",
    "CONTROL_SEQUENCE_END",
    "CONTROL_SEQUENCE_CORRID",
]


class ControlInputSpec(_Frozen):
    """One ``sequence_batching.control_input`` with its (single) control.

    Triton fills these tensors itself; a client never sends them, so they are shown in
    the configuration only."""

    name: str = Field(min_length=1)
    kind: ControlKind
    int32_false_true: tuple[int, ...] = ()
    fp32_false_true: tuple[float, ...] = ()
    bool_false_true: tuple[bool, ...] = ()
    data_type: Literal[
        "TYPE_INVALID", "TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING"
    ] = "TYPE_INVALID"
    """The CORRID tensor's type (TYPE_INVALID for the flag controls)."""

    @model_validator(mode="after")
    def _check_values(self) -> ControlInputSpec:
        values = (self.int32_false_true, self.fp32_false_true, self.bool_false_true)
        given = [pair for pair in values if pair]
        if self.kind == "CONTROL_SEQUENCE_CORRID":
            if given or self.data_type == "TYPE_INVALID":
                raise ValueError("a CORRID control takes a data_type and no false/true values")
        elif len(given) != 1 or len(given[0]) != 2:
            raise ValueError(
                f"a {self.kind} control takes one of int32_false_true, fp32_false_true "
                "or bool_false_true with two values"
            )
        return self


class DirectStrategySpec(_Frozen):
    """``sequence_batching.direct``: each sequence keeps one batch slot until it ends."""

    max_queue_delay_microseconds: int = Field(default=0, ge=0)
    minimum_slot_utilization: float = Field(default=0.0, ge=0.0, le=1.0)


class OldestStrategySpec(_Frozen):
    """``sequence_batching.oldest``: batches form from the oldest sequences' requests."""

    max_candidate_sequences: int = Field(default=0, ge=0)
    """0: as many as there are slots (``max_batch_size`` per instance)."""
    preferred_batch_size: tuple[Annotated[int, Field(ge=1)], ...] = ()
    max_queue_delay_microseconds: int = Field(default=0, ge=0)
    preserve_ordering: bool = False


DEFAULT_SEQUENCE_IDLE_US = 1_000_000
"""Triton's default ``max_sequence_idle_microseconds`` (1 s)."""


class SequenceBatchingSpec(_Frozen):
    """Triton's ``sequence_batching`` block (the fields the simulator acts on or prints)."""

    direct: DirectStrategySpec | None = None
    oldest: OldestStrategySpec | None = None
    max_sequence_idle_microseconds: int = Field(default=DEFAULT_SEQUENCE_IDLE_US, ge=1)
    control_input: tuple[ControlInputSpec, ...] = ()

    @model_validator(mode="after")
    def _one_strategy(self) -> SequenceBatchingSpec:
        if self.direct is not None and self.oldest is not None:
            raise ValueError("sequence_batching takes direct or oldest, not both")
        names = [control.name for control in self.control_input]
        if len(set(names)) != len(names):
            raise ValueError(f"control_input names must be unique, got: {names}")
        return self

    @property
    def strategy(self) -> Literal["direct", "oldest"]:
        """The strategy in force (``direct`` when the block names none, as in Triton)."""
        return "oldest" if self.oldest is not None else "direct"


class _Tensor(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def data_type(self) -> str: ...


class TensorModel(Protocol):
    """What resolving an ensemble reads of a model (``models.ModelSpec`` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def input(self) -> Sequence[_Tensor]: ...
    @property
    def output(self) -> Sequence[_Tensor]: ...
    @property
    def max_batch_size(self) -> int: ...
    @property
    def ensemble_scheduling(self) -> EnsembleSchedulingSpec | None: ...


@dataclass(frozen=True)
class ResolvedStep:
    """A step with its maps filled in: ``inputs`` step input → ensemble tensor, ``outputs``
    step output → ensemble tensor."""

    model: str
    version: int
    inputs: Mapping[str, str]
    outputs: Mapping[str, str]


def resolve_steps(
    spec: TensorModel, lookup: Callable[[str], TensorModel | None]
) -> tuple[ResolvedStep, ...]:
    """The ensemble's steps with chained maps filled and every tensor checked.

    Args:
        spec: an ensemble model (``spec.ensemble_scheduling`` set).
        lookup: the model spec of a step name, or None for an unknown name.

    Raises:
        ValueError: an unknown step model, a tensor no earlier step (nor the request)
            provides, a data-type mismatch, or an ensemble output nothing writes.
    """
    assert spec.ensemble_scheduling is not None
    available = {tensor.name: tensor.data_type for tensor in spec.input}
    previous: Sequence[str] = [tensor.name for tensor in spec.input]
    steps = spec.ensemble_scheduling.step
    resolved = []
    for index, step in enumerate(steps):
        model = lookup(step.model_name)
        if model is None or model.name == spec.name:
            raise ValueError(f"step {index} names no other model of the set: {step.model_name!r}")
        last = index == len(steps) - 1
        inputs = dict(step.input_map) or {
            tensor.name: source for tensor, source in zip(model.input, previous, strict=False)
        }
        outputs = dict(step.output_map) or _chained_outputs(spec, model, index, last=last)
        _check_step(index, model, inputs, outputs, available)
        for name, target in outputs.items():
            available[target] = next(t.data_type for t in model.output if t.name == name)
        previous = list(outputs.values())
        resolved.append(ResolvedStep(model.name, step.model_version, inputs, outputs))
    missing = [tensor.name for tensor in spec.output if tensor.name not in available]
    if missing:
        raise ValueError(f"no step writes the ensemble output(s) {missing}")
    return tuple(resolved)


def check_batch_sizes(spec: TensorModel, lookup: Callable[[str], TensorModel | None]) -> None:
    """Triton's load-time rule: no step may batch less than the ensemble allows.

    Raises:
        ValueError: naming the step.
    """
    assert spec.ensemble_scheduling is not None
    for index, step in enumerate(spec.ensemble_scheduling.step):
        model = lookup(step.model_name)
        if model is not None and 0 < model.max_batch_size < spec.max_batch_size:
            raise ValueError(
                f"the ensemble allows batches of {spec.max_batch_size}, but step {index} "
                f"({model.name}) only {model.max_batch_size}"
            )


def _chained_outputs(
    spec: TensorModel, model: TensorModel, index: int, *, last: bool
) -> dict[str, str]:
    """A chained step's outputs: the ensemble's own names for the last step (by
    position), ``<model>_<index>_<output>`` for the tensors between steps."""
    outputs = {}
    for position, tensor in enumerate(model.output):
        if last and position < len(spec.output):
            outputs[tensor.name] = spec.output[position].name
        else:
            outputs[tensor.name] = f"{model.name}_{index}_{tensor.name}"
    return outputs


def _check_step(
    index: int,
    model: TensorModel,
    inputs: Mapping[str, str],
    outputs: Mapping[str, str],
    available: Mapping[str, str],
) -> None:
    declared_in = {tensor.name: tensor.data_type for tensor in model.input}
    for name, source in inputs.items():
        if name not in declared_in:
            raise ValueError(f"step {index} ({model.name}) has no input {name!r}")
        if source not in available:
            raise ValueError(f"step {index} ({model.name}) reads {source!r}, which nothing wrote")
        if available[source] != declared_in[name]:
            raise ValueError(
                f"step {index} ({model.name}) input {name!r} is {declared_in[name]}, "
                f"but {source!r} is {available[source]}"
            )
    unfed = [name for name in declared_in if name not in inputs]
    if unfed:
        raise ValueError(f"step {index} ({model.name}) gets no tensor for input(s) {unfed}")
    declared_out = {tensor.name for tensor in model.output}
    unknown = [name for name in outputs if name not in declared_out]
    if unknown:
        raise ValueError(f"step {index} ({model.name}) has no output(s) {unknown}")
