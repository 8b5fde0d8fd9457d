"""Property tests: no answer a server sends breaks the canary's or the sweep's readers.

Three readers face the network: the KServe v2 HTTP response decoder and the gRPC
``ModelInferResponse`` decoder (:mod:`tritonwatch.kserve.infer_response`, the canary's)
and the raw HTTP/1.1 parser of the sweep's load generator
(:mod:`tritonwatch.wire.http1`). Each either returns what was sent or raises its
own typed error, which the callers count as a failed request; anything else would be
logged as a crash or, worse, counted as a success.
"""

from __future__ import annotations

import asyncio
import copy
import gzip
import itertools
import json
import math
import zlib
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tritonclient.grpc import service_pb2
from tritonclient.http import InferResult as HttpInferResult
from tritonclient.utils import triton_to_np_dtype

from tritonwatch.kserve.infer_response import (
    InferResponse,
    ResponseDecodeError,
    check_outputs,
    decode_grpc_infer_response,
    decode_http_infer_response,
    decompressed,
)
from tritonwatch.probe.canary.clients import classify_error
from tritonwatch.records.observations import CanaryResult, Outcome
from tritonwatch.wire.http1 import Http1Connection, HttpProtocolError
from tritonwatch.wire.limits import AnswerTooLargeError

_fuzz = settings(max_examples=150, deadline=None)

# -- generated valid responses -----------------------------------------------------------

_NUMERIC = ["BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"]
_NUMERIC += ["FP16", "FP32", "FP64", "BF16"]
_shapes = st.lists(st.integers(0, 3), min_size=0, max_size=3)


@st.composite
def _output(draw: st.DrawFn, name: str) -> tuple[str, str, np.ndarray[Any, Any]]:
    """One output tensor: a name, a datatype and an array of that shape."""
    datatype = draw(st.sampled_from([*_NUMERIC, "BYTES"]))
    shape = tuple(draw(_shapes))
    if datatype == "BYTES":
        count = math.prod(shape)
        array = _objects(
            draw(st.lists(st.binary(max_size=6), min_size=count, max_size=count)), shape
        )
    else:
        dtype = np.dtype(triton_to_np_dtype(datatype))
        elements = st.floats(-1e4, 1e4, width=32) if datatype == "BF16" else None
        array = draw(hnp.arrays(dtype, shape, elements=elements))
    return name, datatype, array


def _objects(items: list[bytes], shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """An object array of bytes (np.array would make equal-length bytes a 2-D array)."""
    array = np.empty(len(items), dtype=np.object_)
    array[:] = items
    return array.reshape(shape)


_outputs = st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=3, unique=True).flatmap(
    lambda names: st.tuples(*[_output(n) for n in names])
)


def _raw(datatype: str, array: np.ndarray[Any, Any]) -> bytes:
    if datatype == "BYTES":
        return b"".join(len(item).to_bytes(4, "little") + item for item in array.reshape(-1))
    return array.astype(array.dtype.newbyteorder("<")).tobytes()


def _http_response(
    outputs: tuple[tuple[str, str, np.ndarray[Any, Any]], ...], binary: bool
) -> tuple[bytes, int | None]:
    """Body and Inference-Header-Content-Length as Triton sends them."""
    entries, chunks = [], []
    for name, datatype, array in outputs:
        entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if binary:
            chunks.append(_raw(datatype, array))
            entry["parameters"] = {"binary_data_size": len(chunks[-1])}
        elif datatype == "BYTES":
            entry["data"] = [item.decode("latin-1") for item in array.reshape(-1)]
        else:
            entry["data"] = (
                array.reshape(-1).astype(np.float64 if datatype == "BF16" else array.dtype).tolist()
            )
        entries.append(entry)
    header = json.dumps({"model_name": "m", "outputs": entries}).encode()
    if not binary:
        return header, None
    return header + b"".join(chunks), len(header)


def _same(ours: np.ndarray[Any, Any], sent: np.ndarray[Any, Any], datatype: str) -> bool:
    if ours.shape != sent.shape:
        return False
    if datatype == "BYTES":
        return [bytes(x) for x in ours.reshape(-1)] == [bytes(x) for x in sent.reshape(-1)]
    return bool(np.array_equal(ours.astype(np.float64), sent.astype(np.float64), equal_nan=True))


def _as_received(datatype: str, sent: np.ndarray[Any, Any], binary: bool) -> np.ndarray[Any, Any]:
    """What a correct decoder gives back for ``sent``: JSON carries BYTES as text, so
    they go out as latin-1 and come back as that text's UTF-8."""
    if datatype == "BYTES" and not binary:
        return _objects([bytes(x).decode("latin-1").encode() for x in sent.reshape(-1)], sent.shape)
    return sent


_Sent = dict[str, tuple[Any, np.ndarray[Any, Any]]]
"""Output name → (how it was put on the wire, the array encoded there)."""


def _sent_over_http(outputs: Any, binary: bool) -> _Sent:
    body, header_length = _http_response(outputs, binary)
    entries = json.loads(body[: header_length or len(body)])["outputs"]
    return {
        entry["name"]: (entry, _as_received(datatype, array, binary))
        for entry, (_, datatype, array) in zip(entries, outputs, strict=True)
    }


def _plain_body(body: bytes, encoding: str | None) -> bytes:
    """``body`` inflated with the standard library's own gzip and zlib readers."""
    normal = (encoding or "identity").strip().lower()
    return {"identity": lambda b: b, "gzip": gzip.decompress, "deflate": zlib.decompress}[normal](
        body
    )


def _assert_http_answer_as_sent(
    decoded: InferResponse, body: bytes, header_length: Any, sent: _Sent | None = None
) -> None:
    """A successful decode holds exactly what the (inflated) answer says: for the first
    entry of each name its datatype, its shape and its own slice of the binary data (the
    slices follow the entries' ``binary_data_size`` in order); and an entry just as we
    encoded it (``sent``) decodes to the very array we encoded."""
    split = len(body) if header_length is None else int(str(header_length).strip())
    document, binary = json.loads(body[:split]), body[split:]
    assert isinstance(document, dict)
    wire: dict[str, tuple[Any, bytes | None]] = {}
    offset = 0
    for entry in document.get("outputs", []):
        size = (entry.get("parameters") or {}).get("binary_data_size")
        wire.setdefault(
            entry["name"], (entry, None if size is None else binary[offset : offset + size])
        )
        offset += size or 0
    assert set(decoded.tensors) == set(wire)
    for name, (entry, raw) in wire.items():
        tensor, shape = decoded.tensors[name], tuple(entry["shape"])
        assert (tensor.datatype, tensor.shape) == (entry["datatype"], shape), name
        assert decoded.outputs[name].shape == shape, name  # the data fill the shape
        if raw is not None:
            assert tensor.raw == raw, name
        ours, array = (sent or {}).get(name, (None, None))
        if entry == ours and (raw is None or raw == _raw(entry["datatype"], array)):
            assert _same(decoded.outputs[name], array, entry["datatype"]), name


@_fuzz
@given(_outputs, st.booleans())
def test_what_is_sent_over_http_is_decoded(outputs: Any, binary: bool) -> None:
    """Breaks if any output of a well-formed answer decodes to other values than sent."""
    body, header_length = _http_response(outputs, binary)
    decoded = decode_http_infer_response(body, header_length)
    assert set(decoded.outputs) == {name for name, _, _ in outputs}
    for name, datatype, sent in outputs:
        assert _same(decoded.outputs[name], _as_received(datatype, sent, binary), datatype), name


@_fuzz
@given(_outputs)
def test_binary_http_decoding_agrees_with_tritonclient(outputs: Any) -> None:
    """tritonclient's InferResult is the reference decoder for well-formed answers."""
    body, header_length = _http_response(outputs, binary=True)
    ours = decode_http_infer_response(body, str(header_length))
    reference = HttpInferResult.from_response_body(body, False, header_length)
    for name, datatype, _ in outputs:
        assert _same(ours.outputs[name], reference.as_numpy(name), datatype), name


# -- HTTP: arbitrary and mutated answers -------------------------------------------------

_encodings = st.sampled_from([None, "gzip", "deflate", "identity", "br", " GZIP "]) | st.text(
    max_size=5
)
_header_lengths = (
    st.none()
    | st.integers(0, 5000)
    | st.text(max_size=8)
    | st.sampled_from(["-1", "1e3", " 12 ", "٣", "9" * 5000, "0x10"])
)


def _decodes_or_raises_typed(
    body: bytes, header_length: Any, encoding: str | None
) -> InferResponse | None:
    try:
        return decode_http_infer_response(body, header_length, encoding)
    except ResponseDecodeError as error:
        message = str(error)
    assert message  # the error always says what is wrong
    return None


@_fuzz
@given(st.binary(max_size=500), _header_lengths, _encodings)
def test_any_bytes_decode_or_raise_response_decode_error(
    body: bytes, header_length: Any, encoding: str | None
) -> None:
    """Breaks if junk raises anything else, or is decoded into outputs it does not hold."""
    decoded = _decodes_or_raises_typed(body, header_length, encoding)
    if decoded is not None:
        _assert_http_answer_as_sent(decoded, _plain_body(body, encoding), header_length)


_json_junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


@_fuzz
@given(_outputs, st.booleans(), st.data())
def test_valid_json_with_wrong_types_raises_only_response_decode_error(
    outputs: Any, binary: bool, data: st.DataObject
) -> None:
    """Breaks if one field of one output (or the document) replaced by any JSON value or
    by that field of another output, or removed, raises anything else, or is read as
    other values than the answer holds."""
    body, header_length = _http_response(outputs, binary)
    split = header_length if header_length is not None else len(body)
    document = json.loads(body[:split])
    where = data.draw(st.sampled_from(["document", "outputs", "entry", "parameters"]))
    if where == "document":
        document = data.draw(_json_junk)
    elif where == "outputs":
        document["outputs"] = data.draw(_json_junk)
    else:
        entry = data.draw(st.sampled_from(document["outputs"]))
        if where == "parameters":
            entry = entry.setdefault("parameters", {})
        key = data.draw(st.sampled_from(sorted(entry) or ["x"]))
        peers = [
            e.get("parameters", {}) if where == "parameters" else e for e in document["outputs"]
        ]
        swaps = [peer[key] for peer in peers if key in peer]  # a plausible slip: decodes
        if data.draw(st.booleans()):
            entry.pop(key, None)
        else:
            entry[key] = data.draw(_json_junk | st.sampled_from(swaps) if swaps else _json_junk)
    header = json.dumps(document).encode()
    new_length = len(header) if header_length is not None else None
    mutated = header + body[split:]
    decoded = _decodes_or_raises_typed(mutated, new_length, None)
    if decoded is not None:
        _assert_http_answer_as_sent(decoded, mutated, new_length, _sent_over_http(outputs, binary))


@_fuzz
@given(_outputs, st.data())
def test_a_truncated_binary_answer_is_always_refused(outputs: Any, data: st.DataObject) -> None:
    """Breaks if a binary answer cut anywhere past its header decodes instead of being refused."""
    body, header_length = _http_response(outputs, binary=True)
    assert header_length is not None
    if len(body) == header_length:
        return  # every tensor is empty: nothing to cut
    cut = data.draw(st.integers(header_length, len(body) - 1))
    with pytest.raises(ResponseDecodeError):
        decode_http_infer_response(body[:cut], header_length)


@_fuzz
@given(_outputs, st.integers(1, 10**6))
def test_a_header_length_beyond_the_body_is_refused(outputs: Any, excess: int) -> None:
    """Breaks if a header length past the body's end is not refused as such."""
    body, _ = _http_response(outputs, binary=True)
    with pytest.raises(ResponseDecodeError, match="past the body"):
        decode_http_infer_response(body, len(body) + excess)


@_fuzz
@given(_outputs, st.booleans(), st.sampled_from(["gzip", "deflate"]), st.data())
def test_compressed_answers_decode_and_damaged_ones_are_refused(
    outputs: Any, binary: bool, encoding: str, data: st.DataObject
) -> None:
    """Breaks if a compressed answer decodes to other values than sent, or a damaged
    stream is taken for an answer other than the one compressed."""
    body, header_length = _http_response(outputs, binary)
    sent = _sent_over_http(outputs, binary)
    packed = gzip.compress(body) if encoding == "gzip" else zlib.compress(body)
    decoded = decode_http_infer_response(packed, header_length, encoding)
    assert decoded.outputs.keys() == {name for name, _, _ in outputs}
    _assert_http_answer_as_sent(decoded, body, header_length, sent)
    damage = data.draw(st.sampled_from(["truncate", "flip", "append"]))
    if damage == "truncate":
        packed = packed[: data.draw(st.integers(0, len(packed) - 1))]
    elif damage == "flip":
        index = data.draw(st.integers(0, len(packed) - 1))
        packed = (
            packed[:index]
            + bytes([packed[index] ^ data.draw(st.integers(1, 255))])
            + packed[index + 1 :]
        )
    else:
        packed += data.draw(st.binary(min_size=1, max_size=4))
    answer = _decodes_or_raises_typed(packed, header_length, encoding)
    if damage in ("truncate", "append"):
        assert answer is None  # a cut or padded stream is never taken as the answer
    elif answer is not None:  # a flip the checksums let through left the content alone
        _assert_http_answer_as_sent(answer, body, header_length, sent)
        assert answer.outputs.keys() == {name for name, _, _ in outputs}


@_fuzz
@given(st.binary(max_size=3000), st.sampled_from(["gzip", "deflate"]), st.integers(-3, 3))
def test_the_inflate_limit_holds_to_the_byte(data: bytes, encoding: str, offset: int) -> None:
    """Breaks if an answer inflating to exactly the limit is refused or one byte more
    is let through."""
    limit = max(1, len(data) + offset)
    packed = gzip.compress(data) if encoding == "gzip" else zlib.compress(data)
    if len(data) <= limit:
        assert decompressed(packed, encoding, limit) == data
    else:
        with pytest.raises(AnswerTooLargeError, match="inflates past"):
            decompressed(packed, encoding, limit)


def test_an_unknown_encoding_is_named() -> None:
    """Breaks if a br or zstd answer (never offered) passes for plain bytes."""
    with pytest.raises(ResponseDecodeError, match="unsupported Content-Encoding 'br'"):
        decode_http_infer_response(b"\x0b\x02\x80{}\x03", None, "br")


@_fuzz
@given(_outputs, st.booleans(), st.data())
def test_any_byte_flipped_answer_decodes_or_raises_typed(
    outputs: Any, binary: bool, data: st.DataObject
) -> None:
    """Breaks if a damaged answer raises anything else, or decodes into values its bytes
    do not hold (a flipped data byte changes that value and nothing else). Half the
    bytes flipped fall in the binary data, where there is any."""
    body, header_length = _http_response(outputs, binary)
    tensors_from = header_length if header_length is not None else len(body)
    for _ in range(data.draw(st.integers(1, 3))):
        in_data = tensors_from < len(body) and data.draw(st.booleans())
        index = data.draw(st.integers(tensors_from if in_data else 0, len(body) - 1))
        body = body[:index] + bytes([data.draw(st.integers(0, 255))]) + body[index + 1 :]
    decoded = _decodes_or_raises_typed(body, header_length, None)
    if decoded is not None:
        _assert_http_answer_as_sent(decoded, body, header_length, _sent_over_http(outputs, binary))


# -- gRPC --------------------------------------------------------------------------------


def _grpc_response(outputs: Any, raw_count: int | None = None) -> Any:
    """A ModelInferResponse as Triton sends it (raw contents for every output), or with
    only the first ``raw_count`` outputs raw and the rest in typed contents."""
    response = service_pb2.ModelInferResponse(model_name="m")
    for index, (name, datatype, array) in enumerate(outputs):
        tensor = response.outputs.add(name=name, datatype=datatype, shape=list(array.shape))
        if raw_count is None or index < raw_count:
            response.raw_output_contents.append(_raw(datatype, array))
        elif datatype == "BYTES":
            tensor.contents.bytes_contents.extend(array.reshape(-1).tolist())
    return response


# The KServe v2 proto's typed field for each datatype (FP16 and BF16 have none).
_TYPED_FIELD = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents",
    "INT32": "int_contents", "INT64": "int64_contents", "UINT8": "uint_contents",
    "UINT16": "uint_contents", "UINT32": "uint_contents", "UINT64": "uint64_contents",
    "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents",
}  # fmt: skip


def _same_values(ours: list[Any], theirs: list[Any]) -> bool:
    """Element by element, NaN equal to NaN."""
    return len(ours) == len(theirs) and all(
        a == b or (a != a and b != b) for a, b in zip(ours, theirs, strict=True)
    )


def _assert_grpc_answer_as_sent(
    decoded: InferResponse, message: Any, sent: dict[str, tuple[Any, Any, Any]] | None = None
) -> None:
    """A successful decode holds exactly what the message says: for the first output of
    each name its datatype, its shape and its data (``raw_output_contents`` at its index,
    else its typed contents); and an output just as we encoded it (``sent``: the output,
    its raw contents or None, the array) decodes to the very array we encoded."""
    raw = list(message.raw_output_contents)
    wire: dict[str, tuple[Any, bytes | None]] = {}
    for index, output in enumerate(message.outputs):
        wire.setdefault(output.name, (output, raw[index] if index < len(raw) else None))
    assert set(decoded.tensors) == set(wire)
    for name, (output, contents) in wire.items():
        tensor, shape = decoded.tensors[name], tuple(output.shape)
        assert (tensor.datatype, tensor.shape) == (output.datatype, shape), name
        assert decoded.outputs[name].shape == shape, name  # the data fill the shape
        if contents is not None:
            assert tensor.raw == contents, name
        elif output.datatype in _TYPED_FIELD:
            typed = list(getattr(output.contents, _TYPED_FIELD[output.datatype]))
            assert _same_values(decoded.outputs[name].reshape(-1).tolist(), typed), name
        else:
            assert tensor.raw == b"", name  # nothing can carry FP16/BF16 but raw contents
        ours, our_contents, array = (sent or {}).get(name, (None, None, None))
        if output == ours and contents == our_contents:
            assert _same(decoded.outputs[name], array, output.datatype), name


def _sent_over_grpc(outputs: Any, response: Any) -> dict[str, tuple[Any, Any, Any]]:
    raw = list(response.raw_output_contents)
    return {
        output.name: (copy.deepcopy(output), raw[index] if index < len(raw) else None, array)
        for index, (output, (_, _, array)) in enumerate(zip(response.outputs, outputs, strict=True))
    }


@_fuzz
@given(_outputs)
def test_what_is_sent_over_grpc_is_decoded_as_tritonclient_does(outputs: Any) -> None:
    """Breaks if a well-formed gRPC answer decodes to other values than sent, or than
    tritonclient's own reader gives."""
    from tritonclient.grpc import InferResult as GrpcInferResult

    response = _grpc_response(outputs)
    for decoded in (
        decode_grpc_infer_response(response),
        decode_grpc_infer_response(response.SerializeToString()),
    ):
        reference = GrpcInferResult(response)
        for name, datatype, array in outputs:
            assert _same(decoded.outputs[name], array, datatype), name
            assert _same(decoded.outputs[name], reference.as_numpy(name), datatype), name


@_fuzz
@given(st.binary(max_size=500))
def test_any_grpc_bytes_decode_or_raise_response_decode_error(data: bytes) -> None:
    """Breaks if junk raises anything else, or is decoded into outputs it does not hold."""
    try:
        decoded = decode_grpc_infer_response(data)
    except ResponseDecodeError:
        return
    _assert_grpc_answer_as_sent(decoded, service_pb2.ModelInferResponse.FromString(data))


@_fuzz
@given(_outputs, st.data())
def test_mutated_grpc_responses_raise_only_response_decode_error(
    outputs: Any, data: st.DataObject
) -> None:
    """Breaks if a mutated message raises anything else, or is read as other values than
    it holds (the outputs the mutation left alone: as sent)."""
    response = _grpc_response(outputs, raw_count=data.draw(st.none() | st.integers(0, 3)))
    sent = _sent_over_grpc(outputs, response)
    tensor = data.draw(st.sampled_from(list(response.outputs)))
    mutation = data.draw(
        st.sampled_from(["shape", "datatype", "raw", "drop_raw", "contents", "bytes"])
    )
    if mutation == "shape":
        tensor.shape[:] = data.draw(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40))
    elif mutation == "datatype":
        tensor.datatype = data.draw(st.sampled_from([*_NUMERIC, "BYTES", "", "fp32", "STRING"]))
    elif mutation == "raw" and response.raw_output_contents:
        index = data.draw(st.integers(0, len(response.raw_output_contents) - 1))
        response.raw_output_contents[index] = data.draw(st.binary(max_size=40))
    elif mutation == "drop_raw":
        del response.raw_output_contents[:]
    elif mutation == "contents":
        tensor.contents.int_contents.extend(
            data.draw(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=5))
        )
        tensor.contents.uint64_contents.extend(
            data.draw(st.lists(st.integers(0, 2**64 - 1), max_size=5))
        )
        tensor.contents.bytes_contents.extend(
            data.draw(st.lists(st.binary(max_size=4), max_size=3))
        )
    serialized = response.SerializeToString()
    if mutation == "bytes" and serialized:
        cut = data.draw(st.integers(0, len(serialized) - 1))
        serialized = serialized[:cut] + data.draw(st.binary(max_size=8))
    try:
        decoded = decode_grpc_infer_response(serialized)
    except ResponseDecodeError:
        return
    received = service_pb2.ModelInferResponse.FromString(serialized)
    _assert_grpc_answer_as_sent(decoded, received, sent)


# -- check_outputs over foreign results --------------------------------------------------


class _Foreign:
    """A result object whose as_numpy fails as tritonclient's do on a malformed answer."""

    def __init__(self, error: BaseException | None, value: Any = None) -> None:
        self.error, self.value = error, value

    def as_numpy(self, name: str) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


@pytest.mark.parametrize(
    "error",
    [
        KeyError("outputs"),
        TypeError("'int' object is not iterable"),
        ValueError("cannot reshape"),
        IndexError("x"),
        AttributeError("get"),
    ],
)
def test_a_foreign_decoders_failure_becomes_response_decode_error(error: BaseException) -> None:
    """Breaks if tritonclient's own decoding errors escape untyped instead of as bad responses."""
    with pytest.raises(ResponseDecodeError, match=r"^output 'y': "):
        check_outputs(_Foreign(error), ["y"])
    assert classify_error(ResponseDecodeError("x"), "http") == Outcome.BAD_RESPONSE
    assert classify_error(ResponseDecodeError("x"), "grpc") == Outcome.BAD_RESPONSE


def test_a_missing_output_is_named() -> None:
    """Breaks if an answer lacking an output the metadata lists passes, or the name is lost."""
    with pytest.raises(
        ResponseDecodeError, match="response lacks output 'y', which the metadata lists"
    ):
        check_outputs(InferResponse({"x": np.zeros(1)}), ["x", "y"])
    check_outputs(InferResponse({"x": np.zeros(1)}), ["x"])  # complete: no error


# -- regressions: what tritonclient's InferResult raised on these answers ---------------


def _binary(header: dict[str, Any], tail: bytes) -> tuple[bytes, int]:
    text = json.dumps(header).encode()
    return text + tail, len(text)


def _one(datatype: str, shape: list[int], **fields: Any) -> dict[str, Any]:
    return {"outputs": [{"name": "y", "datatype": datatype, "shape": shape, **fields}]}


_BINARY_SIZE = {"parameters": {"binary_data_size": 4}}


@pytest.mark.parametrize(
    ("answer", "encoding", "message"),
    [
        # no outputs: KeyError('outputs') there; here no outputs, which check_outputs names
        (_binary({"model_name": "m"}, b"x"), None, None),
        (_binary({"outputs": 5}, b""), None, "'outputs' is not a list"),  # TypeError there
        (_binary(_one("FP32", [1], parameters=3), b""), None, "'parameters' is not an object"),
        (_binary(_one("FP32", [2], **_BINARY_SIZE), b"\0\0\x80?"), None, "needs 2 elements"),
        (_binary(_one("FP32", [1], **_BINARY_SIZE), b"\0\0"), None, "runs past"),
        (_binary(_one("BYTES", [1], **_BINARY_SIZE), b"\x09\0\0\0"), None, "runs past the data"),
        ((b'{"outputs": []}', "12x"), None, "bad Inference-Header-Content-Length"),
        (
            (b"\x1f\x8b\x08\x00junk", None),
            "gzip",
            "gzip body is",
        ),  # OSError there: 'connection_error'
        ((json.dumps(_one("INT8", [1], data=[300])).encode(), None), None, "out of bounds"),
        ((json.dumps(_one("FP32", [-1], data=[])).encode(), None), None, "bad shape"),
        ((json.dumps(_one("FP32", [1], data=["1"])).encode(), None), None, "wrong type"),
        ((b"[" * 100_000 + b"]" * 100_000, None), None, "not JSON"),  # RecursionError
    ],
)
def test_malformed_answers_tritonclient_choked_on_are_response_decode_errors(
    answer: tuple[bytes, Any], encoding: str | None, message: str | None
) -> None:
    """Each raised a bare exception (or a misleading OSError) in tritonclient's InferResult."""
    body, header_length = answer
    if message is None:  # a valid answer without outputs: decoded, and the check names the gap
        assert decode_http_infer_response(body, header_length, encoding).outputs == {}
        return
    with pytest.raises(ResponseDecodeError, match=message):
        decode_http_infer_response(body, header_length, encoding)


# -- the sweep's HTTP/1.1 parser ---------------------------------------------------------


class _Transport(asyncio.Transport):
    def write(self, data: bytes | bytearray | memoryview) -> None:
        pass

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass


def _feed(pieces: list[bytes]) -> tuple[int, bytes] | BaseException | None:
    """Sends a request and feeds the answer in ``pieces``: the response, the typed error,
    or None while the response is still incomplete."""

    async def exchange() -> tuple[int, bytes] | BaseException | None:
        connection = Http1Connection()
        connection.connection_made(_Transport())
        request = asyncio.ensure_future(connection.request(b"POST / HTTP/1.1\r\n\r\n"))
        await asyncio.sleep(0)
        for piece in pieces:
            connection.data_received(piece)
        await asyncio.sleep(0)
        if not request.done():
            request.cancel()
            return None
        return request.exception() or request.result()

    return asyncio.run(exchange())


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)] or [b""]


def _assert_typed(answer: object) -> None:
    assert (
        answer is None
        or isinstance(answer, HttpProtocolError)
        or (
            isinstance(answer, tuple)
            and isinstance(answer[0], int)
            and isinstance(answer[1], bytes)
        )
    ), repr(answer)


@_fuzz
@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=4))
def test_any_bytes_parse_or_raise_http_protocol_error(data: bytes, cuts: list[int]) -> None:
    """Breaks if any bytes, however split, make the sweep's HTTP parser raise an untyped error."""
    _assert_typed(_feed(_split(data, cuts)))


@st.composite
def _http_answers(draw: st.DrawFn) -> tuple[bytes, int, bytes]:
    """A well-formed response with Content-Length or chunked (with trailers at times)."""
    status = draw(st.integers(100, 599))
    body = draw(st.binary(max_size=200))
    if draw(st.booleans()):
        head = f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\nX-A: b\r\n\r\n".encode()
        return head + body, status, body
    sizes = draw(st.lists(st.integers(1, 50), max_size=5))
    chunks, position = [], 0
    for size in sizes:
        piece = body[position : position + size]
        position += len(piece)
        if piece:
            extension = b";ext=1" if draw(st.booleans()) else b""
            chunks.append(f"{len(piece):x}".encode() + extension + b"\r\n" + piece + b"\r\n")
    if position < len(body):
        rest = body[position:]
        chunks.append(f"{len(rest):X}\r\n".encode() + rest + b"\r\n")
    trailer = draw(st.sampled_from([b"", b"X-Trailer: 1\r\n"]))
    head = f"HTTP/1.1 {status} OK\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    return head + b"".join(chunks) + b"0\r\n" + trailer + b"\r\n", status, body


@_fuzz
@given(_http_answers(), st.lists(st.integers(0, 400), max_size=6))
def test_a_valid_answer_is_read_whole_however_it_is_split(answer: Any, cuts: list[int]) -> None:
    """Breaks if a valid answer split across reads is not read whole, status and body."""
    data, status, body = answer
    assert _feed(_split(data, cuts)) == (status, body)


@_fuzz
@given(_http_answers(), st.data())
def test_mutated_answers_parse_or_raise_http_protocol_error(
    answer: Any, data: st.DataObject
) -> None:
    """Breaks if a mutated valid answer raises anything but an HttpProtocolError."""
    raw, _, _ = answer
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(0, len(raw) - 1))
        kind = data.draw(st.sampled_from(["replace", "insert", "delete"]))
        junk = data.draw(
            st.binary(min_size=1, max_size=3)
            | st.sampled_from([b"-", b"\r\n", b"z", b"+", b"\xb2", b"9" * 20])
        )
        if kind == "delete":
            raw = raw[:index] + raw[index + 1 :]
        else:
            raw = raw[:index] + junk + raw[index + (kind == "replace") :]
    _assert_typed(_feed(_split(raw, data.draw(st.lists(st.integers(0, len(raw)), max_size=3)))))


@pytest.mark.parametrize(
    ("response", "message"),
    [
        # int() raised ValueError inside data_received: asyncio logged a fatal error.
        (b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n", "bad Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n", "bad Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
        # These were read as a 200 with a wrong body, i.e. counted as successes.
        (b"HTTP/1.1 200 OK\r\nContent-Length: -4\r\n\r\nabcdef", "bad Content-Length"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\nab\r\n0\r\n\r\n",
            "bad chunk size",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd\r\n0\r\n\r\n",
            "not followed by CRLF",
        ),
        (b"HTTP/1.1 +200 OK\r\nContent-Length: 0\r\n\r\n", "bad status line"),
        (b"HTTP/1.1 2_00 OK\r\nContent-Length: 0\r\n\r\n", "bad status line"),
        (b"garbage 200 OK\r\nContent-Length: 0\r\n\r\n", "bad status line"),
    ],
)
def test_malformed_framing_is_an_http_protocol_error(response: bytes, message: str) -> None:
    """Breaks if bad lengths, chunks or status lines are read as answers, not protocol errors."""
    answer = _feed([response])
    assert isinstance(answer, HttpProtocolError), answer
    assert message in str(answer)


def test_chunked_wins_over_content_length_and_trailers_are_consumed() -> None:
    """RFC 9112: with both headers the body is chunked; trailer fields end with an empty line."""
    response = (
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n0\r\nX-Checksum: 1\r\n\r\n"
    )
    assert _feed([response]) == (200, b"abc")


# -- the callers count a decode error as a failed request --------------------------------


@pytest.mark.parametrize(
    ("answer", "error_text"),
    [
        (ResponseDecodeError("output 'y': bad shape [-1]"), "output 'y': bad shape [-1]"),
        (_Foreign(ValueError("cannot reshape array")), "output 'y': cannot reshape array"),
        (InferResponse({}), "response lacks output 'y', which the metadata lists"),
    ],
)
def test_the_canary_counts_an_unreadable_answer_as_bad_response(
    answer: Any, error_text: str
) -> None:
    """Breaks if the canary counts an unreadable answer as a success or logs an error for
    it: one our decoder refused (which the library, asked for a second opinion, could not
    read either), or a decoded one whose output cannot be read or is missing."""
    from structlog.testing import capture_logs

    from canary_record_support import library_answers, prepared, scripted_client, until
    from tritonwatch.probe.canary.plans import CanaryPlan
    from tritonwatch.state.canary_board import CanaryBoard

    plan = CanaryPlan(
        "t", "m", "", "http", "http://127.0.0.1:1", "grpc://127.0.0.1:2", 1.0, False, 1.0, 4, "zero"
    )
    results: list[CanaryResult] = []

    class RecordingStats(CanaryBoard):
        def record(self, result: CanaryResult) -> None:
            results.append(result)
            super().record(result)

    def library_cannot_read(_timeout: float) -> Any:
        raise ResponseDecodeError("the library could not read it either")

    stats = RecordingStats()
    stats.declare([plan.key])
    client = scripted_client(plan)
    library_answers(client, library_cannot_read)

    async def one_request() -> None:
        canary = await prepared(plan, client, stats)
        now = asyncio.get_running_loop().time()
        canary.record(now, answer, now)
        await until(lambda: bool(results), "the request's outcome")

    with capture_logs() as logs:
        asyncio.run(one_request())
    snapshot = stats.snapshot(0)[0]
    assert snapshot.outcomes[Outcome.BAD_RESPONSE] == 1
    assert snapshot.outcomes[Outcome.SUCCESS] == 0
    assert not [log for log in logs if log["log_level"] in ("error", "critical")]
    assert [(r.outcome, r.error) for r in results] == [(Outcome.BAD_RESPONSE, error_text)]
    assert results[0].latency_seconds is not None  # it answered: the latency counts
    asked = [log for log in logs if log["event"] == "canary_library_agrees"]
    assert len(asked) == (1 if isinstance(answer, BaseException) else 0)


def test_the_load_worker_counts_a_malformed_answer_as_an_error() -> None:
    """A server answering ``Content-Length: -4`` (once read as a 200) gets errors only."""
    from tritonwatch.sweep.spec import LoadSpec
    from tritonwatch.sweep.worker import LoadWorker

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: -4\r\n\r\nabcdef")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client hung up: its next connection gets its own handler
        finally:
            writer.close()  # else the transport outlives the loop and warns in a later test

    async def run() -> tuple[int, int]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        spec = LoadSpec(
            "http", "127.0.0.1", port, b"POST / HTTP/1.1\r\n\r\n", "concurrency", 1, timeout=2.0
        )
        worker = LoadWorker(spec)
        await worker.start()
        for _ in range(200):
            await asyncio.sleep(0.01)
            if worker._window.errors >= 3:
                break
        window = worker.cut()
        await worker.stop()
        server.close()
        await server.wait_closed()
        return len(window.latencies), window.errors

    successes, errors = asyncio.run(run())
    assert successes == 0
    assert errors >= 3


# -- non-200 answers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"error": "unexpected inference input \'x\'"}', "unexpected inference input 'x'"),
        (b"<html>502 Bad Gateway</html>", "<html>502 Bad Gateway</html>"),  # a proxy's page
        (b"", "empty response from the server"),
        (b'["error"]', '["error"]'),
    ],
)
def test_an_error_answer_becomes_the_exception_tritonclient_raises(
    body: bytes, message: str
) -> None:
    """The status travels as a string: the canary's JSON fallback looks for "400"."""
    from tritonwatch.kserve.infer_response import http_status_error

    error = http_status_error(400, body)
    assert error.status() == "400"
    assert error.message() == message
    assert classify_error(error, "http") == Outcome.HTTP_ERROR


@_fuzz
@given(st.binary(max_size=300), st.integers(100, 599))
def test_any_error_body_becomes_an_inference_server_exception(body: bytes, status: int) -> None:
    """Breaks if some error body with a status fails to become an exception with that status."""
    from tritonwatch.kserve.infer_response import http_status_error

    assert http_status_error(status, body).status() == str(status)
