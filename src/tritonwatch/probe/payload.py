"""Request tensors for a model, built from its metadata and config (perf_analyzer's job).

Triton's metadata shapes include the batch dimension as -1 when the model batches;
its config ``dims`` do not. With the config we know which -1 is the batch (we send
batch 1); without it (a plain KServe v2 server) a leading -1 is taken as the batch.
Any other -1 needs a ``canary.inputs.NAME.shape`` override: otherwise
:class:`PayloadError` says which model and input. Arrays are built once and reused
for every request.

BYTES inputs are filled as perf_analyzer fills them: every element its own random
string of ``string_length`` characters (``--string-length``, default 128) drawn from
perf_analyzer's character set (letters, digits, space and ``.?!``, so tokenizers and
JSON encoders take them), or every element the one given ``string_data``
(``--string-data``). Unlike perf_analyzer the strings come from the seeded generator,
so the same config sends the same strings on every run. A sample file wins over both.
``data: zero`` zeroes numeric inputs only, as perf_analyzer's ``--zero-input`` does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from tritonclient.utils import triton_to_np_dtype

from tritonwatch.config.schema import DEFAULT_STRING_LENGTH, InputOverride

DataMode = Literal["random", "zero"]
TRITON_DATATYPES = frozenset(
    {"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
     "FP16", "FP32", "FP64", "BF16", "BYTES"}
)  # fmt: skip
STRING_CHARACTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ1234567890 .?!"
"""perf_analyzer's alphabet for random strings (``character_set`` in its perf_utils.h)."""
_STRING_CODES = np.frombuffer(STRING_CHARACTERS.encode("ascii"), dtype=np.uint8)


class PayloadError(Exception):
    """A model input the canary cannot fill; names the model and the input."""

    def __init__(self, model: str, input_name: str, reason: str) -> None:
        self.model = model
        self.input_name = input_name
        super().__init__(f"model {model!r}, input {input_name!r}: {reason}")


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One input as the server describes it; ``shape`` may hold -1 (dynamic)."""

    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Tensor:
    """A ready-to-send input."""

    name: str
    datatype: str
    data: np.ndarray[Any, Any]


def input_specs(
    model: str, metadata: Mapping[str, Any], config: Mapping[str, Any] | None
) -> list[TensorSpec]:
    """The inputs of ``model`` with the batch dimension resolved to 1 where it is known.

    Args:
        metadata: ``GET v2/models/{m}`` (``inputs[].name/datatype/shape``).
        config: ``GET v2/models/{m}/config`` when the server has it, else None.
    """
    batching = config is not None and int(config.get("max_batch_size", 0)) > 0
    specs = []
    for entry in metadata.get("inputs", []):
        name = str(entry["name"])
        datatype = str(entry["datatype"]).upper()
        if datatype not in TRITON_DATATYPES:
            raise PayloadError(model, name, f"unknown datatype {datatype!r}")
        shape = [int(d) for d in entry.get("shape", [])]
        leading_batch = batching or (config is None and shape[:1] == [-1])
        if leading_batch and shape:
            shape[0] = 1
        specs.append(TensorSpec(name, datatype, tuple(shape)))
    if not specs:
        raise PayloadError(model, "-", "the model metadata lists no inputs")
    return specs


def _load_sample(model: str, name: str, path: Path, datatype: str) -> np.ndarray[Any, Any]:
    try:
        if path.suffix == ".npy":
            array: np.ndarray[Any, Any] = np.load(path, allow_pickle=False)
        elif path.suffix == ".json":
            values = json.loads(path.read_text(encoding="utf-8"))
            kind = np.object_ if datatype == "BYTES" else triton_to_np_dtype(datatype)
            array = np.array(values, dtype=kind)
            if datatype == "BYTES":
                array = np.vectorize(lambda v: str(v).encode(), otypes=[np.object_])(array)
        else:
            raise PayloadError(model, name, f"sample file {path} must be .npy or .json")
    except (OSError, ValueError) as error:
        raise PayloadError(model, name, f"cannot read sample file {path}: {error}") from None
    return array


def _fill(
    spec: TensorSpec, shape: Sequence[int], mode: DataMode, rng: np.random.Generator
) -> np.ndarray[Any, Any]:
    dtype = triton_to_np_dtype(spec.datatype)
    if mode == "zero" or spec.datatype == "BOOL":
        return np.zeros(shape, dtype=dtype)
    if spec.datatype.startswith(("FP", "BF")):
        return rng.random(size=shape, dtype=np.float32).astype(dtype)
    info = np.iinfo(dtype)
    # Small values keep integer models (token ids, indices) in a sane range.
    return rng.integers(max(info.min, 0), min(info.max, 100), size=shape, endpoint=True).astype(
        dtype
    )


def _strings(
    shape: Sequence[int], length: int, data: str | None, rng: np.random.Generator
) -> np.ndarray[Any, Any]:
    """A BYTES tensor: ``data`` (UTF-8) in every element, else a random string each."""
    count = int(np.prod(shape, dtype=np.int64))
    if data is not None:
        values = [data.encode()] * count
    else:
        codes = _STRING_CODES[rng.integers(0, len(_STRING_CODES), size=(count, length))]
        values = [row.tobytes() for row in codes]
    array = np.empty(count, dtype=np.object_)
    array[:] = values
    return array.reshape(shape)


def build_inputs(
    model: str,
    specs: Sequence[TensorSpec],
    overrides: Mapping[str, InputOverride],
    mode: DataMode = "random",
    seed: int = 0,
    *,
    string_length: int = DEFAULT_STRING_LENGTH,
    string_data: str | None = None,
) -> list[Tensor]:
    """Concrete tensors for every input of ``model``.

    Args:
        string_length: characters of each random string in a BYTES input.
        string_data: sent in every element of every BYTES input instead (then
            ``string_length`` is unused), as perf_analyzer's ``--string-data``.

    Raises:
        PayloadError: an input with a dynamic dim and no shape override, an override
            for an input the model does not have, or a sample whose shape contradicts
            the model.
    """
    known = {spec.name for spec in specs}
    for name in overrides:
        if name not in known:
            raise PayloadError(
                model, name, f"no such input (the model has: {', '.join(sorted(known))})"
            )
    rng = np.random.default_rng(seed)
    tensors = []
    for spec in specs:
        override = overrides.get(spec.name, InputOverride())
        shape = tuple(override.shape) if override.shape else spec.shape
        if override.file is not None:
            data = _load_sample(model, spec.name, override.file, spec.datatype)
            if len(data.shape) != len(shape) or any(
                want not in (-1, got) for want, got in zip(shape, data.shape, strict=True)
            ):
                raise PayloadError(
                    model, spec.name, f"sample shape {list(data.shape)} does not fit {list(shape)}"
                )
        elif any(d < 0 for d in shape):
            raise PayloadError(
                model,
                spec.name,
                f"shape {list(spec.shape)} has a dynamic dim; set canary.inputs.{spec.name}.shape",
            )
        elif spec.datatype == "BYTES":
            data = _strings(shape, string_length, string_data, rng)
        else:
            data = _fill(spec, shape, mode, rng)
        tensors.append(Tensor(spec.name, spec.datatype, data))
    return tensors
