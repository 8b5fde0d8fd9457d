"""Tensors on the wire: data types, JSON and binary encodings, input checks, outputs.

Shared by the HTTP and gRPC frontends. Binary tensors are the raw little-endian bytes of
the array; ``BYTES`` elements are each prefixed by a 4-byte little-endian length, as in
Triton's binary tensor extension and ``tritonclient.utils.serialize_byte_tensor``.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tritonwatch.sim.errors import ErrorCode, SimError
from tritonwatch.sim.models import ModelSpec, TensorSpec

Array = npt.NDArray[Any]


@dataclass(frozen=True)
class DataTypeInfo:
    """One Triton data type under its three names."""

    config: str
    """As in model configuration (``TYPE_INT32``)."""
    wire: str
    """As in the inference protocol (``INT32``; ``TYPE_STRING`` is ``BYTES``)."""
    numpy: np.dtype[Any]


_TABLE = (
    DataTypeInfo("TYPE_BOOL", "BOOL", np.dtype(np.bool_)),
    DataTypeInfo("TYPE_UINT8", "UINT8", np.dtype("<u1")),
    DataTypeInfo("TYPE_UINT16", "UINT16", np.dtype("<u2")),
    DataTypeInfo("TYPE_UINT32", "UINT32", np.dtype("<u4")),
    DataTypeInfo("TYPE_UINT64", "UINT64", np.dtype("<u8")),
    DataTypeInfo("TYPE_INT8", "INT8", np.dtype("<i1")),
    DataTypeInfo("TYPE_INT16", "INT16", np.dtype("<i2")),
    DataTypeInfo("TYPE_INT32", "INT32", np.dtype("<i4")),
    DataTypeInfo("TYPE_INT64", "INT64", np.dtype("<i8")),
    DataTypeInfo("TYPE_FP16", "FP16", np.dtype("<f2")),
    DataTypeInfo("TYPE_FP32", "FP32", np.dtype("<f4")),
    DataTypeInfo("TYPE_FP64", "FP64", np.dtype("<f8")),
    DataTypeInfo("TYPE_STRING", "BYTES", np.dtype(np.object_)),
)
BY_CONFIG = {info.config: info for info in _TABLE}
BY_WIRE = {info.wire: info for info in _TABLE}


def wire_type(config_type: str) -> str:
    """``TYPE_INT32`` → ``INT32``; ``TYPE_STRING`` → ``BYTES``."""
    return BY_CONFIG[config_type].wire


def _invalid(message: str) -> SimError:
    return SimError(ErrorCode.INVALID_ARG, message)


def _element_count(shape: Sequence[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def serialize_bytes(array: Array) -> bytes:
    """Encodes a BYTES tensor: each element as a 4-byte LE length, then its bytes."""
    parts = []
    for item in array.reshape(-1):
        raw = item if isinstance(item, bytes) else str(item).encode()
        parts.append(struct.pack("<I", len(raw)))
        parts.append(raw)
    return b"".join(parts)


def deserialize_bytes(raw: bytes | memoryview, count: int, name: str) -> Array:
    """Decodes ``count`` length-prefixed BYTES elements."""
    view = memoryview(raw)
    items: list[bytes] = []
    offset = 0
    while offset < len(view):
        if offset + 4 > len(view):
            raise _invalid(f"unexpected end of BYTES data for input '{name}'")
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if offset + length > len(view):
            raise _invalid(f"unexpected end of BYTES data for input '{name}'")
        items.append(bytes(view[offset : offset + length]))
        offset += length
    if len(items) != count:
        raise _invalid(f"expected {count} BYTES elements for input '{name}', got {len(items)}")
    array = np.empty(count, dtype=np.object_)
    array[:] = items
    return array


def decode_binary(name: str, datatype: str, shape: Sequence[int], raw: bytes | memoryview) -> Array:
    """Builds an array from the raw bytes of one tensor."""
    info = _wire_info(name, datatype)
    count = _element_count(shape)
    if info.wire == "BYTES":
        return deserialize_bytes(raw, count, name).reshape(tuple(shape))
    expected = count * info.numpy.itemsize
    if len(raw) != expected:
        raise _invalid(
            f"unexpected byte size for input '{name}': expected {expected} bytes "
            f"for shape {list(shape)} of {datatype}, got {len(raw)}"
        )
    return np.frombuffer(raw, dtype=info.numpy).reshape(tuple(shape))


def decode_json(name: str, datatype: str, shape: Sequence[int], data: object) -> Array:
    """Builds an array from the ``data`` of a JSON tensor (flat or nested, row-major)."""
    info = _wire_info(name, datatype)
    if info.wire == "BYTES":
        flat = np.asarray(data, dtype=np.object_).reshape(-1)
        items = [item.encode() if isinstance(item, str) else bytes(item) for item in flat]
        array = np.empty(len(items), dtype=np.object_)
        array[:] = items
    else:
        try:
            array = np.asarray(data, dtype=info.numpy).reshape(-1)
        except (TypeError, ValueError) as error:
            raise _invalid(f"unable to parse 'data' of input '{name}': {error}") from None
    if array.size != _element_count(shape):
        raise _invalid(
            f"unexpected number of elements for input '{name}': shape {list(shape)} "
            f"needs {_element_count(shape)}, got {array.size}"
        )
    return array.reshape(tuple(shape))


def encode_binary(datatype: str, array: Array) -> bytes:
    """The raw bytes of an output tensor."""
    if datatype == "BYTES":
        return serialize_bytes(array)
    return np.ascontiguousarray(array, dtype=BY_WIRE[datatype].numpy).tobytes()


def encode_json(datatype: str, array: Array) -> list[Any]:
    """The flat ``data`` list of an output tensor in JSON."""
    flat = array.reshape(-1)
    if datatype == "BYTES":
        return [item.decode(errors="replace") if isinstance(item, bytes) else item for item in flat]
    values: list[Any] = flat.tolist()
    return values


def _wire_info(name: str, datatype: str) -> DataTypeInfo:
    info = BY_WIRE.get(datatype)
    if info is None:
        raise _invalid(f"invalid datatype '{datatype}' for input '{name}'")
    return info


def _shape_text(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(dim) for dim in dims) + "]"


def check_inputs(spec: ModelSpec, inputs: Mapping[str, tuple[str, Sequence[int]]]) -> int:
    """Checks names, data types and shapes against the configuration.

    Args:
        spec: the model being called.
        inputs: input name → (wire data type, shape) as the request states them.

    Returns:
        The request's batch size (1 for a model without batching).

    Raises:
        SimError: INVALID_ARG with a message shaped like Triton's.
    """
    expected = {tensor.name: tensor for tensor in spec.input}
    unknown = [name for name in inputs if name not in expected]
    if unknown:
        raise _invalid(f"unexpected inference input '{unknown[0]}' for model '{spec.name}'")
    missing = [name for name in expected if name not in inputs]
    if missing:
        raise _invalid(
            f"expected {len(expected)} inputs but got {len(inputs)} inputs for model "
            f"'{spec.name}'. Got input(s) {sorted(inputs)}, but missing required input(s) "
            f"{missing}. Please provide all required input(s)."
        )
    batch_sizes = {_check_one(spec, expected[name], *inputs[name]) for name in inputs}
    if len(batch_sizes) != 1:
        raise _invalid(
            f"inputs of model '{spec.name}' disagree on the batch size, got: {sorted(batch_sizes)}"
        )
    return batch_sizes.pop()


def _check_one(spec: ModelSpec, tensor: TensorSpec, datatype: str, shape: Sequence[int]) -> int:
    want_type = wire_type(tensor.data_type)
    if datatype != want_type:
        raise _invalid(
            f"inference input '{tensor.name}' data-type is '{datatype}', but model "
            f"'{spec.name}' expects '{want_type}'"
        )
    batched = spec.max_batch_size > 0
    full_dims = ((-1,) if batched else ()) + tensor.dims
    got = tuple(shape)
    if batched and got[1:] == tensor.dims and len(got) == len(full_dims):
        if not 1 <= got[0] <= spec.max_batch_size:
            raise _invalid(
                f"inference request batch-size must be <= {spec.max_batch_size} for "
                f"'{spec.name}', got: {got[0]}"
            )
        return got[0]
    if not batched and got == tensor.dims:
        return 1
    raise _invalid(
        f"unexpected shape for input '{tensor.name}' for model '{spec.name}'. "
        f"Expected {_shape_text(full_dims)}, got {_shape_text(got)}"
    )


def compute_outputs(
    spec: ModelSpec, inputs: Mapping[str, Array], batch_size: int
) -> dict[str, Array]:
    """What the simulated model returns: see ``ModelSpec.compute``."""
    if spec.compute == "add_sub":
        first, second = (inputs[tensor.name] for tensor in spec.input)
        total, difference = (tensor.name for tensor in spec.output)
        return {total: first + second, difference: first - second}
    if spec.compute == "identity":
        return {
            out.name: inputs[inp.name] for inp, out in zip(spec.input, spec.output, strict=True)
        }
    outputs = {}
    for tensor in spec.output:
        shape = ((batch_size,) if spec.max_batch_size > 0 else ()) + tensor.dims
        info = BY_CONFIG[tensor.data_type]
        if info.wire == "BYTES":
            outputs[tensor.name] = np.full(shape, b"", dtype=np.object_)
        else:
            outputs[tensor.name] = np.zeros(shape, dtype=info.numpy)
    return outputs
