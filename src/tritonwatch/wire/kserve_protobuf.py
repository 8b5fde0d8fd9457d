"""The KServe v2 gRPC messages the canary sends and reads, in protobuf's wire format, by hand.

Why not ``tritonclient.grpc.service_pb2``: importing it imports ``grpc`` and the whole
``tritonclient.grpc`` package (its ``__init__`` loads the client), about 23 MiB of a
daemon whose gRPC canaries already send from the engine's own h2c client
(:mod:`~tritonwatch.wire.http2`). The canary needs three messages, so here is the
minimum of the wire format they use (protobuf's encoding guide): varints, fixed 32/64
bit numbers, length-delimited fields, packed repeated scalars, and maps as repeated
key/value entries.

* :func:`encode_infer_request` writes a ``ModelInferRequest`` byte for byte as
  ``service_pb2``'s ``SerializeToString`` does (fields in number order, proto3 defaults
  left out, a oneof's value always written, map entries with key and value, in the
  order its deterministic serializer writes them; tests/wire/test_kserve_protobuf.py
  holds it to that).
* :func:`decode_infer_response` and :func:`decode_stream_infer_response` read a
  ``ModelInferResponse`` and a ``ModelStreamInferResponse`` by proto3's rules: unknown
  fields and fields of an unexpected wire type skipped, the last of a repeated singular
  field winning, a message field seen twice merged, packed and unpacked repeated
  scalars both read. Anything malformed raises :class:`ProtobufDecodeError`, never
  another exception, so the canary counts it as ``bad_response``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


class WireTensor(Protocol):
    """What an input needs to be written: the canary's ``kserve.payload.Tensor`` is one.

    A protocol, not that class, so that the wire code knows nothing of the canary."""

    @property
    def name(self) -> str: ...
    @property
    def datatype(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def raw(self) -> bytes: ...


Scalar = bool | int | float | str
"""An ``InferParameter``'s value: bool, int64 (uint64 past its range), double or string."""
ParameterValue = Scalar | None
"""A decoded parameter; None when the message set none of the oneof's fields."""

VARINT, FIXED64, LENGTH, START_GROUP, END_GROUP, FIXED32 = 0, 1, 2, 3, 4, 5
_MASK64 = (1 << 64) - 1
_MAX_FIELD_NUMBER = (1 << 29) - 1
_MAX_GROUP_DEPTH = 64
_INT64_MIN, _UINT64_END = -(1 << 63), 1 << 64


class ProtobufDecodeError(ValueError):
    """Bytes that are not the protobuf message they should be (truncated, a varint
    longer than ten bytes, a field number 0, a string that is not UTF-8, …)."""


# -- encoding ----------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    """``value`` as a varint; a negative one as its 64-bit two's complement (ten bytes)."""
    value &= _MASK64
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


_LENGTH_KEYS = tuple(_key(number, LENGTH) for number in range(16))
"""The one-byte keys of length-delimited fields 0-15 (every field these messages have)."""


def _length_delimited(number: int, payload: bytes) -> bytes:
    size = len(payload)
    return _LENGTH_KEYS[number] + (bytes((size,)) if size < 0x80 else _varint(size)) + payload


def _string(number: int, text: str) -> bytes:
    """A singular proto3 string: nothing when empty (the default is never written)."""
    return _length_delimited(number, text.encode("utf-8")) if text else b""


def _packed_int64(number: int, values: Sequence[int]) -> bytes:
    return _length_delimited(number, b"".join(map(_varint, values))) if values else b""


def _parameter(value: Scalar) -> bytes:
    """An ``InferParameter``: its one oneof field, written even when it is the default."""
    if isinstance(value, bool):
        return _key(1, VARINT) + _varint(int(value))
    if isinstance(value, int):
        if _INT64_MIN <= value < 1 << 63:
            return _key(2, VARINT) + _varint(value)
        if value < _UINT64_END:
            return _key(5, VARINT) + _varint(value)
        raise ValueError(f"parameter value {value} fits neither int64 nor uint64")
    if isinstance(value, float):
        return _key(4, FIXED64) + struct.pack("<d", value)
    if isinstance(value, str):
        return _string_always(3, value)
    raise TypeError(f"a parameter is bool, int, float or str, not {type(value).__name__}")


def _string_always(number: int, text: str) -> bytes:
    return _length_delimited(number, text.encode("utf-8"))


def _upb_order(key: str) -> list[int]:
    """upb's deterministic map order: bytes ascending, but a key before its own prefixes
    (its sorter compares the common bytes, then puts the longer key first)."""
    return [*key.encode("utf-8"), 256]


def _parameters(number: int, parameters: Mapping[str, Scalar]) -> bytes:
    """A ``map<string, InferParameter>``: one entry (key 1, value 2) per key, in the
    order service_pb2's deterministic serializer writes them (any order is valid)."""
    return b"".join(
        _length_delimited(
            number, _string_always(1, name) + _length_delimited(2, _parameter(parameters[name]))
        )
        for name in sorted(parameters, key=_upb_order)
    )


def encode_infer_request(
    model_name: str,
    model_version: str,
    tensors: Sequence[WireTensor],
    *,
    request_id: str = "",
    parameters: Mapping[str, Scalar] | None = None,
    input_parameters: Mapping[str, Mapping[str, Scalar]] | None = None,
    outputs: Mapping[str, Mapping[str, Scalar]] | None = None,
) -> bytes:
    """A serialized ``ModelInferRequest``: each tensor an input (name, datatype, shape,
    its ``input_parameters``) with its bytes as ``raw_input_contents``; ``outputs``
    the outputs asked for (name to its parameters; none: the server sends all).

    Raises:
        ValueError, TypeError: a parameter value protobuf cannot carry.
    """
    input_parameters = input_parameters or {}
    inputs = b"".join(
        _length_delimited(
            5,
            _string(1, tensor.name)
            + _string(2, tensor.datatype)
            + _packed_int64(3, tensor.shape)
            + _parameters(4, input_parameters.get(tensor.name, {})),
        )
        for tensor in tensors
    )
    requested = b"".join(
        _length_delimited(6, _string(1, name) + _parameters(2, own))
        for name, own in (outputs or {}).items()
    )
    return b"".join(
        (
            _string(1, model_name),
            _string(2, model_version),
            _string(3, request_id),
            _parameters(4, parameters or {}),
            inputs,
            requested,
            b"".join(_length_delimited(7, tensor.raw) for tensor in tensors),
        )
    )


# -- decoding ----------------------------------------------------------------------------


# The decoded messages are plain (not frozen) slots dataclasses: a frozen one's __init__
# sets each field through object.__setattr__, 2 us a message on the test VM, and one is
# made per answer and per streamed token on the engine thread. Nothing writes to them.


@dataclass(slots=True)
class TensorContents:
    """``InferTensorContents``: typed elements, which Triton never sends (it sends raw)."""

    bool_contents: tuple[bool, ...] = ()
    int_contents: tuple[int, ...] = ()
    int64_contents: tuple[int, ...] = ()
    uint_contents: tuple[int, ...] = ()
    uint64_contents: tuple[int, ...] = ()
    fp32_contents: tuple[float, ...] = ()
    fp64_contents: tuple[float, ...] = ()
    bytes_contents: tuple[bytes, ...] = ()


_NO_CONTENTS = TensorContents()


@dataclass(slots=True)
class InferOutput:
    """``ModelInferResponse.InferOutputTensor``."""

    name: str = ""
    datatype: str = ""
    shape: tuple[int, ...] = ()
    parameters: Mapping[str, ParameterValue] = field(default_factory=dict)
    contents: TensorContents = field(default_factory=TensorContents)


@dataclass(slots=True)
class InferResponseMessage:
    """``ModelInferResponse``."""

    model_name: str = ""
    model_version: str = ""
    id: str = ""
    parameters: Mapping[str, ParameterValue] = field(default_factory=dict)
    outputs: tuple[InferOutput, ...] = ()
    raw_output_contents: tuple[bytes, ...] = ()


@dataclass(slots=True)
class StreamInferResponseMessage:
    """``ModelStreamInferResponse``: an in-band error, or one response of the stream."""

    error_message: str = ""
    infer_response: InferResponseMessage = field(default_factory=InferResponseMessage)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` (as an unsigned 64-bit number) and the position after it."""
    end = len(data)
    if pos < end and data[pos] < 0x80:  # most varints here are one byte
        return data[pos], pos + 1
    result = shift = 0
    while pos < end:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & _MASK64, pos
        shift += 7
        if shift >= 70:
            raise ProtobufDecodeError("a varint longer than ten bytes")
    raise ProtobufDecodeError("truncated: the message ends inside a varint")


def _fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """Each field of a message: (number, wire type, value), the value an int for
    varints and fixed numbers (fixed ones as unsigned), bytes for length-delimited
    fields; groups are skipped whole (no message here has one). A list, one-byte tags
    and lengths read inline: this runs for every answer on the engine thread."""
    fields: list[tuple[int, int, int | bytes]] = []
    pos, end = 0, len(data)
    while pos < end:
        tag = data[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _read_varint(data, pos)
        number, wire_type = tag >> 3, tag & 7
        if not 0 < number <= _MAX_FIELD_NUMBER:
            raise ProtobufDecodeError(f"field number {number} is out of range")
        value: int | bytes | None
        if wire_type == LENGTH:
            length = data[pos] if pos < end else 0x80
            if length < 0x80:
                pos += 1
            else:
                length, pos = _read_varint(data, pos)
            if length > end - pos:
                raise ProtobufDecodeError(
                    f"truncated: field {number} needs {length} bytes, {end - pos} are left"
                )
            value, pos = data[pos : pos + length], pos + length
        elif wire_type == VARINT:
            value, pos = _read_varint(data, pos)
        else:
            value, pos = _other_field(data, pos, number, wire_type)
            if value is None:
                continue
        fields.append((number, wire_type, value))
    return fields


def _other_field(data: bytes, pos: int, number: int, wire_type: int) -> tuple[int | None, int]:
    """A fixed-width field's value (None for a group, skipped) and where the next starts."""
    if wire_type in (FIXED64, FIXED32):
        size = 8 if wire_type == FIXED64 else 4
        if size > len(data) - pos:
            raise ProtobufDecodeError(f"truncated: field {number} needs {size} bytes")
        return int.from_bytes(data[pos : pos + size], "little"), pos + size
    if wire_type == START_GROUP:
        return None, _skip_group(data, pos, number, 1)
    # an END_GROUP outside a group, or wire type 6 or 7
    raise ProtobufDecodeError(f"field {number}: wire type {wire_type} is invalid here")


def _skip_group(data: bytes, pos: int, number: int, depth: int) -> int:
    """The position after the group opened by field ``number`` (an unknown field)."""
    if depth > _MAX_GROUP_DEPTH:
        raise ProtobufDecodeError("groups nested too deep")
    end = len(data)
    while pos < end:
        tag, pos = _read_varint(data, pos)
        inner, wire_type = tag >> 3, tag & 7
        if not 0 < inner <= _MAX_FIELD_NUMBER:
            raise ProtobufDecodeError(f"field number {inner} is out of range")
        if wire_type == END_GROUP:
            if inner != number:
                raise ProtobufDecodeError(f"group {number} ended by field {inner}")
            return pos
        if wire_type == VARINT:
            _, pos = _read_varint(data, pos)
        elif wire_type == LENGTH:
            length, pos = _read_varint(data, pos)
            pos += length
        elif wire_type in (FIXED64, FIXED32):
            pos += 8 if wire_type == FIXED64 else 4
        elif wire_type == START_GROUP:
            pos = _skip_group(data, pos, inner, depth + 1)
            continue
        else:
            raise ProtobufDecodeError(f"field {inner}: wire type {wire_type} is invalid")
        if pos > end:
            raise ProtobufDecodeError(f"truncated: group {number} runs past the message")
    raise ProtobufDecodeError(f"truncated: group {number} never ends")


def _text(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ProtobufDecodeError(f"a string field is not UTF-8: {error}") from None


def _signed64(value: int) -> int:
    return value - _UINT64_END if value >> 63 else value


def _signed32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >> 31 else value


def _decode_parameter(data: bytes) -> ParameterValue:
    """An ``InferParameter``'s value: the last oneof field set wins, as protobuf's do."""
    if len(data) == 2 and data[0] == 0x08 and data[1] < 0x80:  # a bool: every response has
        return data[1] != 0  # triton_final_response
    value: ParameterValue = None
    for number, wire_type, raw in _fields(data):
        if wire_type == VARINT:
            assert isinstance(raw, int)
            if number == 1:
                value = raw != 0
            elif number == 2:
                value = _signed64(raw)
            elif number == 5:
                value = raw
        elif number == 3 and wire_type == LENGTH:
            assert isinstance(raw, bytes)
            value = _text(raw)
        elif number == 4 and wire_type == FIXED64:
            assert isinstance(raw, int)
            value = struct.unpack("<d", raw.to_bytes(8, "little"))[0]
    return value


def _add_map_entry(parameters: dict[str, ParameterValue], entry: bytes) -> None:
    """One ``ParametersEntry``: a missing key is "", a missing value none set."""
    key, value = b"", b""
    for number, wire_type, raw in _fields(entry):
        if wire_type == LENGTH and number in (1, 2):
            assert isinstance(raw, bytes)
            if number == 1:
                key = raw
            else:
                value += raw  # a message field seen twice merges: its bytes concatenate
    parameters[_text(key)] = _decode_parameter(value)


def _repeated(
    raw: int | bytes, wire_type: int, scalar: int, read: Callable[[bytes], list[int]]
) -> list[int]:
    """A repeated scalar's elements from one field: packed (length-delimited) or one."""
    if wire_type == LENGTH:
        assert isinstance(raw, bytes)
        return read(raw)
    if wire_type == scalar:
        assert isinstance(raw, int)
        return [raw]
    return []  # another wire type: an unknown field, skipped


def _packed_varints(data: bytes) -> list[int]:
    values, pos, end = [], 0, len(data)
    while pos < end:
        value, pos = _read_varint(data, pos)
        values.append(value)
    return values


def _packed_fixed(size: int) -> Callable[[bytes], list[int]]:
    def read(data: bytes) -> list[int]:
        if len(data) % size:
            raise ProtobufDecodeError(f"packed fixed{size * 8} data of {len(data)} bytes")
        return [int.from_bytes(data[i : i + size], "little") for i in range(0, len(data), size)]

    return read


_FIXED32_PACKED, _FIXED64_PACKED = _packed_fixed(4), _packed_fixed(8)


def _floats(values: list[int], code: str) -> tuple[float, ...]:
    """Fixed-width little-endian bits (``values``, as unsigned) read as floats."""
    count, bits = len(values), "I" if code == "f" else "Q"
    return struct.unpack(f"<{count}{code}", struct.pack(f"<{count}{bits}", *values))


def _decode_contents(data: bytes) -> TensorContents:
    varints: dict[int, list[int]] = {1: [], 2: [], 3: [], 4: [], 5: []}
    fp32: list[int] = []
    fp64: list[int] = []
    strings: list[bytes] = []
    for number, wire_type, raw in _fields(data):
        if number in varints:
            varints[number] += _repeated(raw, wire_type, VARINT, _packed_varints)
        elif number == 6:
            fp32 += _repeated(raw, wire_type, FIXED32, _FIXED32_PACKED)
        elif number == 7:
            fp64 += _repeated(raw, wire_type, FIXED64, _FIXED64_PACKED)
        elif number == 8 and wire_type == LENGTH:
            assert isinstance(raw, bytes)
            strings.append(raw)
    return TensorContents(
        bool_contents=tuple(v != 0 for v in varints[1]),
        int_contents=tuple(_signed32(v) for v in varints[2]),
        int64_contents=tuple(_signed64(v) for v in varints[3]),
        uint_contents=tuple(v & 0xFFFFFFFF for v in varints[4]),
        uint64_contents=tuple(varints[5]),
        fp32_contents=_floats(fp32, "f"),
        fp64_contents=_floats(fp64, "d"),
        bytes_contents=tuple(strings),
    )


def _decode_output(data: bytes) -> InferOutput:
    name = datatype = b""
    shape: list[int] = []
    parameters: dict[str, ParameterValue] = {}
    contents: bytes | None = None
    for number, wire_type, raw in _fields(data):
        if number == 3:
            shape += (_signed64(v) for v in _repeated(raw, wire_type, VARINT, _packed_varints))
            continue
        if wire_type != LENGTH:
            continue
        assert isinstance(raw, bytes)
        if number == 1:
            name = raw
        elif number == 2:
            datatype = raw
        elif number == 4:
            _add_map_entry(parameters, raw)
        elif number == 5:
            contents = raw if contents is None else contents + raw
    return InferOutput(
        _text(name),
        _text(datatype),
        tuple(shape),
        parameters,
        _decode_contents(contents) if contents is not None else _NO_CONTENTS,
    )


def decode_infer_response(data: bytes) -> InferResponseMessage:
    """A serialized ``ModelInferResponse``.

    Raises:
        ProtobufDecodeError: naming what is malformed.
    """
    texts = [b"", b"", b""]
    parameters: dict[str, ParameterValue] = {}
    outputs: list[InferOutput] = []
    raw_contents: list[bytes] = []
    for number, wire_type, raw in _fields(data):
        if wire_type != LENGTH:
            continue
        assert isinstance(raw, bytes)
        if number <= 3:
            texts[number - 1] = raw
        elif number == 4:
            _add_map_entry(parameters, raw)
        elif number == 5:
            outputs.append(_decode_output(raw))
        elif number == 6:
            raw_contents.append(raw)
    model_name, model_version, request_id = map(_text, texts)
    return InferResponseMessage(
        model_name, model_version, request_id, parameters, tuple(outputs), tuple(raw_contents)
    )


def decode_stream_infer_response(data: bytes) -> StreamInferResponseMessage:
    """A serialized ``ModelStreamInferResponse``.

    Raises:
        ProtobufDecodeError: naming what is malformed.
    """
    error = b""
    response = b""
    for number, wire_type, raw in _fields(data):
        if wire_type != LENGTH:
            continue
        assert isinstance(raw, bytes)
        if number == 1:
            error = raw
        elif number == 2:
            response += raw  # a message field seen twice merges: its bytes concatenate
    return StreamInferResponseMessage(_text(error), decode_infer_response(response))


def decode_server_ready_response(data: bytes) -> bool:
    """``ServerReadyResponse.ready`` (field 1, bool; proto3 leaves a false one out).

    Raises:
        ProtobufDecodeError: ``data`` is no such message.
    """
    ready = False
    for number, wire_type, value in _fields(data):
        if number == 1 and wire_type == VARINT:
            ready = bool(value)  # the last one wins, as proto3 reads a repeated scalar
    return ready
