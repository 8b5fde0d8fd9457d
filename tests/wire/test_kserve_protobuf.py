"""The hand-written KServe v2 protobuf messages agree with ``tritonclient.grpc.service_pb2``.

service_pb2 (upb) is the oracle: requests are held to its serializer byte for byte,
responses are decoded as it parses them (unknown fields, wrong wire types, merged
message fields, packed and unpacked repeated scalars), and whatever bytes it refuses
are refused here, as :class:`ProtobufDecodeError` and nothing else.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb

from tritonwatch.kserve.payload import Tensor
from tritonwatch.wire.datatypes import TRITON_DATATYPES
from tritonwatch.wire.kserve_protobuf import (
    InferOutput,
    InferResponseMessage,
    ParameterValue,
    ProtobufDecodeError,
    Scalar,
    StreamInferResponseMessage,
    TensorContents,
    decode_infer_response,
    decode_stream_infer_response,
    encode_infer_request,
)

_fuzz = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- strategies ----------------------------------------------------------------------------

texts = st.text(max_size=12)
int64s = st.integers(-(2**63), 2**63 - 1)
uint64s = st.integers(0, 2**64 - 1)
scalars: st.SearchStrategy[Scalar] = st.one_of(
    st.booleans(), int64s, st.integers(2**63, 2**64 - 1), st.floats(), texts
)
parameter_maps = st.dictionaries(texts, scalars, max_size=4)
datatypes = st.sampled_from(sorted(TRITON_DATATYPES))
shapes = st.lists(int64s, max_size=5).map(tuple)
tensors = st.builds(Tensor, texts, datatypes, shapes, st.binary(max_size=24))


def _set(parameter: Any, value: Scalar) -> None:
    """One ``InferParameter`` set as encode_infer_request chooses its field."""
    if isinstance(value, bool):
        parameter.bool_param = value
    elif isinstance(value, int):
        if value < 2**63:
            parameter.int64_param = value
        else:
            parameter.uint64_param = value
    elif isinstance(value, float):
        parameter.double_param = value
    else:
        parameter.string_param = value


def _fill(target: Any, parameters: dict[str, Scalar]) -> None:
    for name, value in parameters.items():
        _set(target[name], value)


@st.composite
def requests(draw: st.DrawFn) -> tuple[dict[str, Any], bytes]:
    """Arguments of encode_infer_request, and service_pb2's deterministic bytes for them."""
    model, version, request_id = draw(texts), draw(texts), draw(texts)
    inputs = draw(st.lists(tensors, max_size=4))
    parameters = draw(parameter_maps)
    names = [t.name for t in inputs]
    input_parameters = {n: draw(parameter_maps) for n in names if draw(st.booleans())}
    outputs = draw(st.dictionaries(texts, parameter_maps, max_size=3))
    message = pb.ModelInferRequest(model_name=model, model_version=version, id=request_id)
    _fill(message.parameters, parameters)
    for tensor in inputs:
        added = message.inputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        _fill(added.parameters, input_parameters.get(tensor.name, {}))
        message.raw_input_contents.append(tensor.raw)
    for name, own in outputs.items():
        _fill(message.outputs.add(name=name).parameters, own)
    arguments = {
        "model_name": model,
        "model_version": version,
        "tensors": inputs,
        "request_id": request_id,
        "parameters": parameters,
        "input_parameters": input_parameters,
        "outputs": outputs,
    }
    return arguments, message.SerializeToString(deterministic=True)


finite32 = st.floats(width=32, allow_nan=False)
finite64 = st.floats(allow_nan=False)


@st.composite
def responses(draw: st.DrawFn) -> Any:
    """A ``ModelInferResponse`` with everything it may carry, typed contents too."""
    message = pb.ModelInferResponse(model_name=draw(texts), model_version=draw(texts),
                                    id=draw(texts))  # fmt: skip
    _fill(message.parameters, draw(parameter_maps.map(_no_nan)))
    for _ in range(draw(st.integers(0, 3))):
        output = message.outputs.add(name=draw(texts), datatype=draw(datatypes),
                                     shape=draw(shapes))  # fmt: skip
        _fill(output.parameters, draw(parameter_maps.map(_no_nan)))
        contents = output.contents
        contents.bool_contents.extend(draw(st.lists(st.booleans(), max_size=3)))
        contents.int_contents.extend(draw(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=3)))
        contents.int64_contents.extend(draw(st.lists(int64s, max_size=3)))
        contents.uint_contents.extend(draw(st.lists(st.integers(0, 2**32 - 1), max_size=3)))
        contents.uint64_contents.extend(draw(st.lists(uint64s, max_size=3)))
        contents.fp32_contents.extend(draw(st.lists(finite32, max_size=3)))
        contents.fp64_contents.extend(draw(st.lists(finite64, max_size=3)))
        contents.bytes_contents.extend(draw(st.lists(st.binary(max_size=5), max_size=3)))
    message.raw_output_contents.extend(draw(st.lists(st.binary(max_size=16), max_size=3)))
    return message


def _no_nan(parameters: dict[str, Scalar]) -> dict[str, Scalar]:
    """NaN is never equal to itself, so decoded parameters with one could not compare."""
    return {k: v for k, v in parameters.items() if not (isinstance(v, float) and math.isnan(v))}


@st.composite
def unknown_fields(draw: st.DrawFn) -> bytes:
    """Fields no KServe message here has (numbers 9 to 2**29-1), of every wire type."""
    out = b""
    for _ in range(draw(st.integers(0, 3))):
        number = draw(st.integers(9, 2**29 - 2))  # a group holds field number + 1
        kind = draw(st.sampled_from(["varint", "fixed64", "bytes", "fixed32", "group"]))
        if kind == "varint":
            out += _key(number, 0) + _varint(draw(uint64s))
        elif kind == "fixed64":
            out += _key(number, 1) + draw(st.binary(min_size=8, max_size=8))
        elif kind == "bytes":
            data = draw(st.binary(max_size=8))
            out += _key(number, 2) + _varint(len(data)) + data
        elif kind == "fixed32":
            out += _key(number, 5) + draw(st.binary(min_size=4, max_size=4))
        else:
            out += _key(number, 3) + _key(number + 1, 0) + b"\x05" + _key(number, 4)
    return out


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _key(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


# -- what service_pb2 parsed, in this module's terms ----------------------------------------


def _parameters(source: Any) -> dict[str, ParameterValue]:
    return {
        name: (None if (which := p.WhichOneof("parameter_choice")) is None else getattr(p, which))
        for name, p in source.items()
    }


def _contents(contents: Any) -> TensorContents:
    return TensorContents(*(tuple(getattr(contents, f.name)) for f in contents.DESCRIPTOR.fields))


def _expected(message: Any) -> InferResponseMessage:
    outputs = tuple(
        InferOutput(
            o.name, o.datatype, tuple(o.shape), _parameters(o.parameters), _contents(o.contents)
        )
        for o in message.outputs
    )
    return InferResponseMessage(message.model_name, message.model_version, message.id,
                                _parameters(message.parameters), outputs,
                                tuple(message.raw_output_contents))  # fmt: skip


def _expected_stream(message: Any) -> StreamInferResponseMessage:
    return StreamInferResponseMessage(message.error_message, _expected(message.infer_response))


# -- encoding ------------------------------------------------------------------------------


@_fuzz
@given(requests())
def test_requests_are_service_pb2s_bytes(case: tuple[dict[str, Any], bytes]) -> None:
    """Breaks if a ModelInferRequest (names, ids, every parameter kind, shapes with
    negative dims, input and output parameters, raw contents) differs by one byte from
    what service_pb2 serializes for it."""
    arguments, expected = case
    assert encode_infer_request(**arguments) == expected


def test_a_request_leaves_defaults_out_but_writes_a_oneofs_default() -> None:
    """Breaks if an empty version or id is written (tritonclient writes none), or a
    parameter that is false, 0 or "" is dropped (it is the request's meaning)."""
    tensor = Tensor("x", "INT32", (), b"")
    encoded = encode_infer_request("m", "", [tensor], parameters={"a": False, "b": 0, "c": ""})
    assert encoded == (
        b"\x0a\x01m"
        + b"\x22\x07\x0a\x01a\x12\x02\x08\x00"
        + b"\x22\x07\x0a\x01b\x12\x02\x10\x00"
        + b"\x22\x07\x0a\x01c\x12\x02\x1a\x00"
        + b"\x2a\x0a\x0a\x01x\x12\x05INT32"
        + b"\x3a\x00"
    )


def test_a_parameter_protobuf_cannot_carry_is_refused() -> None:
    """Breaks if an int past uint64 or a value of another type is silently written."""
    with pytest.raises(ValueError, match="neither int64 nor uint64"):
        encode_infer_request("m", "", [], parameters={"big": 2**64})
    with pytest.raises(TypeError, match="not list"):
        encode_infer_request("m", "", [], parameters={"x": []})  # type: ignore[dict-item]


# -- decoding ------------------------------------------------------------------------------


@_fuzz
@given(responses(), unknown_fields(), unknown_fields())
def test_responses_decode_as_service_pb2_parses_them(
    message: Any, before: bytes, after: bytes
) -> None:
    """Breaks if any field of a ModelInferResponse (parameters of every kind, outputs'
    shapes and typed contents, raw contents) is read otherwise than by service_pb2, or
    unknown fields around it are not skipped."""
    data = before + message.SerializeToString() + after
    assert decode_infer_response(data) == _expected(pb.ModelInferResponse.FromString(data))


@_fuzz
@given(responses(), texts, unknown_fields())
def test_stream_responses_decode_as_service_pb2_parses_them(
    response: Any, error: str, unknown: bytes
) -> None:
    """Breaks if a ModelStreamInferResponse's error or response is lost or misread."""
    message = pb.ModelStreamInferResponse(error_message=error, infer_response=response)
    data = message.SerializeToString() + unknown
    expected = _expected_stream(pb.ModelStreamInferResponse.FromString(data))
    assert decode_stream_infer_response(data) == expected


def test_proto3_rules_skipped_wire_types_merges_and_unpacked_repeats() -> None:
    """Breaks if a known field of the wrong wire type is not skipped, a message field
    sent twice is not merged, the last of a singular field does not win, or unpacked
    shape/contents elements are not read (parsers must take both forms)."""
    output = (
        b"\x0a\x01o"  # name
        + b"\x08\x07"  # name as a varint: skipped
        + b"\x18\x02\x18\x7f"  # shape, unpacked: 2, 127
        + b"\x1a\x01\x03"  # shape, packed: 3
        + b"\x2a\x03\x10\x81\x01"  # contents.int_contents unpacked: 129
        + b"\x2a\x05\x35\x00\x00\xc0\x3f"  # contents again (merged): fp32 1.5 unpacked
    )
    response = (
        b"\x0a\x01a\x0a\x01b"  # model_name twice: the last wins
        + b"\x2a"
        + bytes((len(output),))
        + output
        + b"\x32\x00"  # one empty raw content
    )
    stream = b"\x12\x03\x1a\x01x" + b"\x12" + bytes((len(response),)) + response
    expected = _expected_stream(pb.ModelStreamInferResponse.FromString(stream))
    decoded = decode_stream_infer_response(stream)
    assert decoded == expected
    assert decoded.infer_response.id == "x" and decoded.infer_response.model_name == "b"
    (out,) = decoded.infer_response.outputs
    assert (out.name, out.shape) == ("o", (2, 127, 3))
    assert (out.contents.int_contents, out.contents.fp32_contents) == ((129,), (1.5,))
    assert decoded.infer_response.raw_output_contents == (b"",)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"\x0a\x05ab", "field 1 needs 5 bytes, 2 are left"),
        (b"\x08" + b"\xff" * 10 + b"\x01", "longer than ten bytes"),
        (b"\x08\xff", "ends inside a varint"),
        (b"\x00\x01", "field number 0"),
        (b"\x0a\x02\xff\xfe", "not UTF-8"),
        (b"\x0f", "wire type 7"),
        (b"\x0c", "wire type 4"),  # a group's end without its start
        (b"\x4b\x08\x01", "group 9 never ends"),
        (b"\x2a\x03\x1a\x01\x80", "ends inside a varint"),  # an output's packed shape
        (b"\x2a\x04\x2a\x02\x35\x00", "field 6 needs 4 bytes"),  # a contents' fixed32 cut short
    ],
)
def test_malformed_responses_say_what_is_wrong(data: bytes, words: str) -> None:
    """Breaks if a malformed response passes, or fails with another exception or
    without naming its fault; service_pb2 refuses each of them too."""
    with pytest.raises(DecodeError):
        pb.ModelInferResponse.FromString(data)
    with pytest.raises(ProtobufDecodeError, match=words):
        decode_infer_response(data)


@_fuzz
@given(responses(), st.data())
def test_truncated_and_damaged_responses_agree_with_service_pb2(
    message: Any, data: st.DataObject
) -> None:
    """Breaks if a cut or damaged response is read where service_pb2 refuses it (or
    refused where it reads it), or fails with anything but ProtobufDecodeError."""
    whole = pb.ModelStreamInferResponse(infer_response=message).SerializeToString()
    cut = whole[: data.draw(st.integers(0, len(whole)))]
    if cut and data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(cut) - 1))
        cut = cut[:at] + bytes((data.draw(st.integers(0, 255)),)) + cut[at + 1 :]
    try:
        expected = _expected_stream(pb.ModelStreamInferResponse.FromString(cut))
    except DecodeError:
        with pytest.raises(ProtobufDecodeError):
            decode_stream_infer_response(cut)
        return
    decoded = decode_stream_infer_response(cut)
    assert _same(decoded, expected)


def _same(decoded: StreamInferResponseMessage, expected: StreamInferResponseMessage) -> bool:
    """Equal, NaN included (a damaged float may become one): compared as their repr."""
    return repr(decoded) == repr(expected) or decoded == expected


@_fuzz
@given(st.binary(max_size=64))
def test_any_bytes_decode_or_raise_protobuf_decode_error(data: bytes) -> None:
    """Breaks if arbitrary bytes raise anything but ProtobufDecodeError, or are read
    where service_pb2 refuses them."""
    try:
        pb.ModelInferResponse.FromString(data)
        refused = False
    except DecodeError:
        refused = True
    try:
        decode_infer_response(data)
    except ProtobufDecodeError:
        assert refused, data
    else:
        assert not refused, data


def test_a_double_parameter_keeps_its_bits() -> None:
    """Breaks if a double parameter is written or read other than as 8 little-endian
    bytes (a sampling temperature would change)."""
    encoded = encode_infer_request("m", "", [], parameters={"t": 0.7})
    assert encoded.endswith(b"\x21" + struct.pack("<d", 0.7))
    response = pb.ModelInferResponse()
    response.parameters["t"].double_param = 0.7
    assert decode_infer_response(response.SerializeToString()).parameters == {"t": 0.7}
