"""Request tensors for a model, built from its metadata and config (perf_analyzer's job).

Triton's metadata shapes include the batch dimension as -1 when the model batches;
its config ``dims`` do not. With the config we know which -1 is the batch (we send
batch 1, as perf_analyzer does by default); without it (a plain KServe v2 server) a
leading -1 is taken as the batch. Any other -1 (a dynamic dim) is ``dynamic_dim`` (the
canary sends 1, so a model nobody configured still gets a request) unless
``canary.inputs.NAME.shape`` gives the whole shape; without a ``dynamic_dim`` (the
sweep, like perf_analyzer without ``--shape``) it is a :class:`PayloadError`.

Metadata says nothing of optional inputs or shape tensors; the config does
(``optional: true``, ``is_shape_tensor: true`` on an input). An optional input is
left out unless ``canary.inputs`` names it, as a client that does not need it leaves
it out. A shape tensor's *values* are shapes the model acts on, which random numbers
are not: it is sent only from a sample file, otherwise the model cannot be filled
(:class:`PayloadError`, which the canary reports as skipped). Tensors are built once
and reused for every request.

A :class:`Tensor` holds its elements as the wire carries them (little-endian; BYTES
length-prefixed), built with the standard library (:mod:`~tritonwatch.wire.datatypes`):
the HTTP canary never imports numpy, ``ml_dtypes`` or ``tritonclient`` (16 MiB of the
daemon's footprint). numpy is imported on use only, where it is the input or the
output: sample files, the gRPC client's encoder and :attr:`Tensor.data`.

BYTES inputs are filled as perf_analyzer fills them: every element its own random
string of ``string_length`` characters (``--string-length``, default 128) drawn from
perf_analyzer's character set (letters, digits, space and ``.?!``, so tokenizers and
JSON encoders take them), or every element the one given ``string_data``
(``--string-data``). Unlike perf_analyzer the strings (and the random numbers) come
from a seeded generator, so the same config sends the same data on every run. A
sample file wins over both.
``data: zero`` zeroes numeric inputs only, as perf_analyzer's ``--zero-input`` does.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tritonwatch.config.canary_schema import DEFAULT_STRING_LENGTH, InputOverride
from tritonwatch.wire.datatypes import (
    TRITON_DATATYPES,
    bytes_elements,
    pack,
    serialize_bytes,
    unpack,
    zeros,
)

DataMode = Literal["random", "zero"]
STRING_CHARACTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ1234567890 .?!"
"""perf_analyzer's alphabet for random strings (``character_set`` in its perf_utils.h)."""
_SMALL_INTEGERS = range(101)
"""Random integers are 0..100: token ids and indices stay in a sane range in every type."""
_FLOAT_STEP = 2.0**-24
"""Random floats are k / 2**24 in [0, 1): numpy's float32 draws, exact in every float type."""


class PayloadError(Exception):
    """A model input the canary cannot fill; names the model and the input."""

    def __init__(self, model: str, input_name: str, reason: str) -> None:
        self.model = model
        self.input_name = input_name
        self.reason = f"input {input_name!r}: {reason}"
        """Which input and why, without the model (for a label next to ``model``)."""
        super().__init__(f"model {model!r}, {self.reason}")


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One input as the server describes it; ``shape`` may hold -1 (dynamic)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    optional: bool = False
    """The config marks it ``optional``: sent only when ``canary.inputs`` names it."""
    shape_tensor: bool = False
    """The config marks it ``is_shape_tensor``: only a sample file can fill it."""


@dataclass(frozen=True, slots=True)
class Tensor:
    """A ready-to-send input, or a decoded output: what every encoder and decoder shares."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    raw: bytes = field(repr=False)
    """The elements in row-major order as Triton's binary tensor extension and gRPC's
    raw contents carry them: little-endian, or for BYTES each a 4-byte little-endian
    length and its bytes."""

    def values(self) -> list[Any]:
        """The elements, flat, as Python values (bytes for BYTES; floats for FP16/BF16)."""
        return unpack(self.datatype, self.raw)

    @property
    def data(self) -> Any:
        """The tensor as a numpy array (BF16 as ``ml_dtypes.bfloat16``, BYTES as objects
        holding bytes), read-only. Imports numpy: for the gRPC encoder and tests only."""
        import numpy as np  # noqa: PLC0415 - the HTTP canary never needs it

        if self.datatype == "BYTES":
            items = list(bytes_elements(self.raw))
            array = np.empty(len(items), dtype=np.object_)
            array[:] = items
            array.flags.writeable = False
            return array.reshape(self.shape)
        return np.frombuffer(self.raw, dtype=_numpy_dtype(self.datatype)).reshape(self.shape)

    @classmethod
    def from_numpy(cls, name: str, datatype: str, array: Any) -> Tensor:
        """``array`` sent as ``datatype`` (numbers cast to its type, BYTES elements that
        are not bytes sent as their UTF-8 text, as ``tritonclient`` sends them)."""
        import numpy as np  # noqa: PLC0415 - samples and tests only

        shape = tuple(int(d) for d in np.shape(array))
        if datatype == "BYTES":
            flat = np.asarray(array).reshape(-1).tolist()
            items = [v if isinstance(v, bytes) else str(v).encode("utf-8") for v in flat]
            return cls(name, datatype, shape, serialize_bytes(items))
        raw = np.ascontiguousarray(array, dtype=_numpy_dtype(datatype)).tobytes()
        return cls(name, datatype, shape, raw)


def _numpy_dtype(datatype: str) -> Any:
    """The little-endian numpy dtype of ``datatype`` (tritonclient's mapping)."""
    import numpy as np  # noqa: PLC0415
    from tritonclient.utils import triton_to_np_dtype  # noqa: PLC0415 - brings ml_dtypes

    return np.dtype(triton_to_np_dtype(datatype)).newbyteorder("<")


def input_specs(
    model: str, metadata: Mapping[str, Any], config: Mapping[str, Any] | None
) -> list[TensorSpec]:
    """The inputs of ``model`` with the batch dimension resolved to 1 where it is known.

    Args:
        metadata: ``GET v2/models/{m}`` (``inputs[].name/datatype/shape``).
        config: ``GET v2/models/{m}/config`` when the server has it, else None
            (``input[].optional`` and ``input[].is_shape_tensor`` are read from it).
    """
    batching = config is not None and int(config.get("max_batch_size", 0)) > 0
    configured = {str(entry.get("name")): entry for entry in (config or {}).get("input") or []}
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
        own = configured.get(name, {})
        specs.append(
            TensorSpec(
                name,
                datatype,
                tuple(shape),
                optional=bool(own.get("optional", False)),
                shape_tensor=bool(own.get("is_shape_tensor", False)),
            )
        )
    if not specs:
        raise PayloadError(model, "-", "the model metadata lists no inputs")
    return specs


def _load_sample(model: str, name: str, path: Path, datatype: str) -> Tensor:
    """A ``.npy`` or ``.json`` sample as the input's tensor (numpy reads it, on use).

    A sample whose numbers are of another kind than the input's (floats for an INT32
    input) is refused; within a kind (a ``.npy`` of float64 for FP32) it is cast.
    """
    import numpy as np  # noqa: PLC0415 - only sample files need it

    try:
        if path.suffix == ".npy":
            array: Any = np.load(path, allow_pickle=False)
        elif path.suffix == ".json":
            values = json.loads(path.read_text(encoding="utf-8"))
            kind = np.object_ if datatype == "BYTES" else _numpy_dtype(datatype)
            array = np.array(values, dtype=kind)
            if datatype == "BYTES":
                array = np.vectorize(lambda v: str(v).encode(), otypes=[np.object_])(array)
        else:
            raise PayloadError(model, name, f"sample file {path} must be .npy or .json")
    except (OSError, ValueError) as error:
        raise PayloadError(model, name, f"cannot read sample file {path}: {error}") from None
    if datatype != "BYTES" and not np.can_cast(array.dtype, _numpy_dtype(datatype), "same_kind"):
        raise PayloadError(
            model, name, f"sample file {path} holds {array.dtype}, which is no {datatype}"
        )
    return Tensor.from_numpy(name, datatype, array)


def _fill(spec: TensorSpec, shape: Sequence[int], mode: DataMode, rng: random.Random) -> bytes:
    count = math.prod(shape)
    if mode == "zero" or spec.datatype == "BOOL":
        return zeros(spec.datatype, count)
    if spec.datatype.startswith(("FP", "BF")):
        return pack(spec.datatype, [rng.getrandbits(24) * _FLOAT_STEP for _ in range(count)])
    return pack(spec.datatype, rng.choices(_SMALL_INTEGERS, k=count))


def _strings(shape: Sequence[int], length: int, data: str | None, rng: random.Random) -> bytes:
    """A BYTES tensor: ``data`` (UTF-8) in every element, else a random string each."""
    count = math.prod(shape)
    if data is not None:
        return serialize_bytes([data.encode()] * count)
    return serialize_bytes(
        "".join(rng.choices(STRING_CHARACTERS, k=length)).encode("ascii") for _ in range(count)
    )


def build_inputs(
    model: str,
    specs: Sequence[TensorSpec],
    overrides: Mapping[str, InputOverride],
    mode: DataMode = "random",
    seed: int = 0,
    *,
    string_length: int = DEFAULT_STRING_LENGTH,
    string_data: str | None = None,
    dynamic_dim: int | None = None,
) -> list[Tensor]:
    """Concrete tensors for every input of ``model`` that is sent: every required one,
    and the optional ones ``overrides`` names.

    Args:
        string_length: characters of each random string in a BYTES input.
        string_data: sent in every element of every BYTES input instead (then
            ``string_length`` is unused), as perf_analyzer's ``--string-data``.
        dynamic_dim: the size of every dynamic dim (-1) an override does not fix;
            None refuses such an input, as perf_analyzer does without ``--shape``.

    Raises:
        PayloadError: a dynamic dim with no shape override and no ``dynamic_dim``, a
            shape tensor without a sample file, an override for an input the model
            does not have, or a sample whose shape contradicts the model.
    """
    known = {spec.name for spec in specs}
    for name in overrides:
        if name not in known:
            raise PayloadError(
                model, name, f"no such input (the model has: {', '.join(sorted(known))})"
            )
    rng = random.Random(seed)  # noqa: S311 - test data, not secrets
    tensors = []
    for spec in specs:
        if spec.optional and spec.name not in overrides:
            continue
        override = overrides.get(spec.name, InputOverride())
        shape = tuple(override.shape) if override.shape else spec.shape
        if override.file is not None:
            sample = _load_sample(model, spec.name, override.file, spec.datatype)
            if len(sample.shape) != len(shape) or any(
                want not in (-1, got) for want, got in zip(shape, sample.shape, strict=True)
            ):
                raise PayloadError(
                    model,
                    spec.name,
                    f"sample shape {list(sample.shape)} does not fit {list(shape)}",
                )
            tensors.append(sample)
            continue
        if spec.shape_tensor:
            raise PayloadError(
                model,
                spec.name,
                "is a shape tensor (its values are shapes the model uses, not data), "
                f"so only a sample can fill it; set canary.inputs.{spec.name}.file",
            )
        if any(d < 0 for d in shape):
            if dynamic_dim is None:
                raise PayloadError(
                    model,
                    spec.name,
                    f"shape {list(spec.shape)} has a dynamic dim; "
                    f"set canary.inputs.{spec.name}.shape",
                )
            shape = tuple(dynamic_dim if d < 0 else d for d in shape)
        if spec.datatype == "BYTES":
            raw = _strings(shape, string_length, string_data, rng)
        else:
            raw = _fill(spec, shape, mode, rng)
        tensors.append(Tensor(spec.name, spec.datatype, tuple(shape), raw))
    return tensors
