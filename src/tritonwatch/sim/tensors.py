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
from tritonwatch.sim.models import ModelSpec

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
    info = datatype_info(name, datatype)
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


_JSON_KINDS = {
    # wire-type family → (numpy kinds a JSON number array may have, what RapidJSON calls it)
    "float": ("iuf", "attempt to access JSON non-number as double"),
    "int": ("iu", "attempt to access JSON non-signed-integer as signed-integer"),
    "uint": ("iu", "attempt to access JSON non-unsigned-integer as unsigned-integer"),
    "bool": ("b", "attempt to access JSON non-boolean as boolean"),
}


def _json_family(info: DataTypeInfo) -> str:
    kind = info.numpy.kind
    return {"f": "float", "i": "int", "u": "uint", "b": "bool"}[kind]


def _unparsable(message: str) -> SimError:
    """Triton's JSON reader fails with INTERNAL (500), not INVALID_ARG."""
    return SimError(ErrorCode.INTERNAL, message)


def decode_json(name: str, datatype: str, shape: Sequence[int], data: object) -> Array:
    """Builds an array from the ``data`` of a JSON tensor (flat or nested, row-major).

    Fails as Triton's HTTP frontend does: an unknown datatype is INVALID_ARG; a value of
    the wrong JSON type, or a count that does not fill ``shape``, is INTERNAL with the
    message of Triton's JSON reader.
    """
    info = datatype_info(name, datatype)
    mismatch = _unparsable(
        "Unable to parse 'data': Shape does not match true shape of 'data' field"
    )
    try:
        if info.wire == "BYTES":
            flat = np.asarray(data, dtype=np.object_).reshape(-1)
            if not all(isinstance(item, str) for item in flat):
                raise _unparsable(
                    "Unable to parse JSON bytes array: attempt to access JSON non-string as string"
                )
            array = np.empty(len(flat), dtype=np.object_)
            array[:] = [item.encode() for item in flat]
        else:
            values = np.asarray(data)
            kinds, message = _JSON_KINDS[_json_family(info)]
            wrong_kind = values.size > 0 and values.dtype.kind not in kinds
            if wrong_kind or (info.numpy.kind == "u" and values.size > 0 and values.min() < 0):
                raise _unparsable(f"Unable to parse 'data': {message}")
            array = values.astype(info.numpy).reshape(-1)
    except ValueError:  # ragged nesting
        raise mismatch from None
    if array.size != _element_count(shape):
        raise mismatch
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


def datatype_info(name: str, datatype: str) -> DataTypeInfo:
    """The data type a request names for input ``name`` (INVALID_ARG when unknown)."""
    info = BY_WIRE.get(datatype)
    if info is None:
        raise _invalid(f"invalid datatype for input {name}")
    return info


def _shape_text(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(dim) for dim in dims) + "]"


def _names_text(names: Sequence[str]) -> str:
    return "[" + ",".join(f"'{name}'" for name in names) + "]"


def request_label(request_id: str) -> str:
    """The prefix Triton's core puts on most request errors (``LogRequest``)."""
    return f"[request id: {request_id or '<id_unknown>'}] "


_BATCH_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch "
    "dimension to be prepended to each input shape. If you want to specify the full shape "
    "including the batch dim in your input dims config, try setting max_batch_size to zero. "
    "See the model configuration docs for more info on max_batch_size."
)


@dataclass(frozen=True, slots=True)
class RequestInput:
    """One input tensor as a request states it, before the model's checks.

    Exactly one of ``array`` (JSON ``data``, already decoded, so it fills ``shape``) and
    ``raw`` (binary tensor extension, gRPC contents) is set. Raw bytes are checked against
    the model's shape only after names, types and shapes, as Triton's core does.
    """

    name: str
    datatype: str
    shape: tuple[int, ...]
    array: Array | None = None
    raw: bytes | memoryview | None = None


def check_inputs(spec: ModelSpec, inputs: Mapping[str, tuple[str, Sequence[int]]]) -> int:
    """Checks names, data types and shapes (no data) against the configuration.

    Args:
        spec: the model being called.
        inputs: input name → (wire data type, shape) as the request states them.

    Returns:
        The request's batch size (1 for a model without batching).

    Raises:
        SimError: INVALID_ARG with Triton's message.
    """
    requests = [
        RequestInput(name, datatype, tuple(shape), array=np.empty(0))
        for name, (datatype, shape) in inputs.items()
    ]
    return _check(spec, requests, request_label(""))


def prepare_inputs(
    spec: ModelSpec,
    inputs: Sequence[RequestInput],
    requested_outputs: Sequence[str] = (),
    request_id: str = "",
) -> tuple[int, dict[str, Array]]:
    """Validates a request as Triton's core does and decodes its raw tensors.

    The order is Triton's: requested outputs, the number of inputs, the batch size, then
    per input its name, data type and shape, and last the byte size of its data.

    Returns:
        The batch size (1 without batching) and the arrays by input name.

    Raises:
        SimError: INVALID_ARG with Triton's message (and request-id prefix).
    """
    label = request_label(request_id)
    outputs = {tensor.name for tensor in spec.output}
    for name in requested_outputs:
        if name not in outputs:
            raise _invalid(f"unexpected inference output '{name}' for model '{spec.name}'")
    batch_size = _check(spec, inputs, label)
    arrays = {tensor.name: _decoded(spec, tensor, batch_size, label) for tensor in inputs}
    return batch_size, arrays


def _check(spec: ModelSpec, inputs: Sequence[RequestInput], label: str) -> int:
    expected = {tensor.name: tensor for tensor in spec.input}
    given = [tensor.name for tensor in inputs]
    if len(set(given)) != len(expected) or len(given) != len(expected):
        missing = [name for name in expected if name not in given]
        raise _invalid(
            f"{label}expected {len(expected)} inputs but got {len(given)} inputs for model "
            f"'{spec.name}'. Got input(s) {_names_text(given)}, but missing required input(s) "
            f"{_names_text(missing)}. Please provide all required input(s)."
        )
    batched = spec.max_batch_size > 0
    batch_size = 1
    if batched:
        for tensor in inputs:
            if not tensor.shape:
                raise _invalid(
                    f"{label}input '{tensor.name}' has no shape but model requires batch "
                    f"dimension for '{spec.name}'"
                )
        batch_size = inputs[0].shape[0]
        for tensor in inputs[1:]:
            if tensor.shape[0] != batch_size:
                raise _invalid(
                    f"{label}input '{tensor.name}' batch size does not match other inputs "
                    f"for '{spec.name}'"
                )
        if batch_size > spec.max_batch_size:
            raise _invalid(
                f"{label}inference request batch-size must be <= {spec.max_batch_size} "
                f"for '{spec.name}'"
            )
    for tensor in inputs:
        config = expected.get(tensor.name)
        if config is None:
            raise _invalid(f"unexpected inference input '{tensor.name}' for model '{spec.name}'")
        want = wire_type(config.data_type)
        if tensor.datatype != want:
            said = tensor.datatype if tensor.datatype in BY_WIRE else "<invalid>"
            raise _invalid(
                f"{label}inference input '{tensor.name}' data-type is '{said}', but model "
                f"'{spec.name}' expects '{want}'"
            )
        dims = tensor.shape[1:] if batched else tensor.shape
        if dims != config.dims:
            full = ((-1,) if batched else ()) + config.dims
            raise _invalid(
                f"{label}unexpected shape for input '{tensor.name}' for model '{spec.name}'. "
                f"Expected {_shape_text(full)}, got {_shape_text(tensor.shape)}. "
                + (_BATCH_NOTE if batched else "")
            )
    return batch_size


def _decoded(spec: ModelSpec, tensor: RequestInput, batch_size: int, label: str) -> Array:
    """The tensor's array, after Triton's byte-size check (a batch of 0 never passes it:
    Triton sizes the data as if for one row)."""
    info = BY_WIRE[tensor.datatype]
    if info.wire == "BYTES":
        if tensor.array is not None:
            return tensor.array
        return deserialize_bytes(
            tensor.raw or b"", _element_count(tensor.shape), tensor.name
        ).reshape(tensor.shape)
    batched = spec.max_batch_size > 0
    rows = ((max(1, batch_size),) if batched else ()) + tensor.shape[1 if batched else 0 :]
    expected = _element_count(rows) * info.numpy.itemsize
    got = (
        len(tensor.raw)
        if tensor.raw is not None
        else (tensor.array.nbytes if tensor.array is not None else 0)
    )
    if got != expected or (batched and batch_size == 0):
        raise _invalid(
            f"{label}input byte size mismatch for input '{tensor.name}' for model "
            f"'{spec.name}'. Expected {expected}, got {got}"
        )
    if tensor.array is not None:
        return tensor.array
    return np.frombuffer(tensor.raw or b"", dtype=info.numpy).reshape(tensor.shape)


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
