"""Decodes KServe v2 infer responses (HTTP JSON + binary tensors, gRPC ModelInferResponse).

The canary counts a response that cannot be read as ``bad_response``. ``tritonclient``'s
own ``InferResult`` classes decode lazily and, on a malformed answer, raise whatever
the broken step raises (``KeyError``, ``TypeError``, ``AttributeError``,
``struct.error``, a gzip ``OSError`` that would pass for a connection error), so the
canary reads answers here instead: every output is checked and decoded once, and the
only exception is :class:`ResponseDecodeError`, whose message names the output and the
fault.

Outputs are checked and kept as :class:`~tritonwatch.kserve.payload.Tensor` s (their
bytes), with the standard library only: numpy, ``ml_dtypes`` and ``tritonclient``
stay out of the HTTP canary. What numpy refused when it decoded here (300 as INT8,
an element count that does not fill the shape, a shape too big for an array) is still
refused (:mod:`~tritonwatch.wire.datatypes`); ``as_numpy`` makes an array on request.
"""

from __future__ import annotations

import json
import math
import sys
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tritonwatch.common.kserve import GRPC_TYPED_CONTENTS
from tritonwatch.kserve.payload import Tensor
from tritonwatch.kserve.server_errors import ServerError
from tritonwatch.wire.datatypes import (
    ITEM_SIZES,
    TRITON_DATATYPES,
    ElementError,
    element_count,
    pack,
    serialize_bytes,
)
from tritonwatch.wire.kserve_protobuf import ProtobufDecodeError, decode_infer_response
from tritonwatch.wire.limits import DEFAULT_LIMITS, AnswerLimits, AnswerTooLargeError

MAX_DECOMPRESSED_BYTES = DEFAULT_LIMITS.max_answer_bytes
"""A compressed answer may not inflate past ``canary.limits.max_answer_bytes`` (16 MiB
unless configured): a gzip bomb is ``too_large``, never an out-of-memory daemon."""
_WBITS = {"gzip": 31, "deflate": 15}  # zlib's window bits for each Content-Encoding
_END = object()


class ResponseDecodeError(ValueError):
    """An infer response that is not a readable KServe v2 answer."""


@dataclass(frozen=True, slots=True)
class InferResponse:
    """Every output of one answer, checked; ``as_numpy`` as on tritonclient's results."""

    tensors: Mapping[str, Any]
    """Each output by name: a :class:`Tensor` from the decoders (an array where a test
    builds the answer itself)."""
    received_at: float | None = None
    """The event loop's time when the answer's last byte arrived, set by the canary's
    clients: the end of the request's latency (decoding after it is our own CPU)."""

    def has(self, name: str) -> bool:
        return name in self.tensors

    def as_numpy(self, name: str) -> Any:
        """Output ``name`` as a numpy array (imported on use), or None if absent."""
        value = self.tensors.get(name)
        return value.data if isinstance(value, Tensor) else value

    @property
    def outputs(self) -> dict[str, Any]:
        """Every output as a numpy array (imports numpy: for tests and tools)."""
        return {name: self.as_numpy(name) for name in self.tensors}


def check_outputs(result: Any, names: Sequence[str]) -> None:
    """Raises :class:`ResponseDecodeError` unless ``result`` holds every output in
    ``names`` (the ones the model's metadata lists).

    ``result`` is an :class:`InferResponse` or anything with ``as_numpy``, whose
    decoding errors are turned into ResponseDecodeError here.
    """
    if isinstance(result, InferResponse):  # checked when decoded: only presence is left
        for name in names:
            if not result.has(name):
                raise ResponseDecodeError(
                    f"response lacks output {name!r}, which the metadata lists"
                )
        return
    for name in names:
        try:
            array = result.as_numpy(name)
        except ResponseDecodeError:
            raise
        except Exception as error:  # a foreign decoder's failure: the answer is bad
            raise ResponseDecodeError(f"output {name!r}: {error}") from None
        if array is None:
            raise ResponseDecodeError(f"response lacks output {name!r}, which the metadata lists")


def http_status_error(status: int, body: bytes) -> ServerError:
    """The exception for a non-200 answer, as ``tritonclient.http`` raises it: the
    server's ``{"error": ...}`` text and the status as a string."""
    try:
        message = json.loads(body)["error"] if body else "empty response from the server"
    except (ValueError, KeyError, TypeError, IndexError, RecursionError):
        message = body[:200].decode("utf-8", "replace")
    return ServerError(msg=str(message)[:500], status=str(status))


# -- HTTP --------------------------------------------------------------------------------


def decode_http_infer_response(
    body: bytes,
    header_length: str | int | None = None,
    content_encoding: str | None = None,
    received_at: float | None = None,
) -> InferResponse:
    """Decodes a 200 answer to ``POST v2/models/{m}/infer``.

    Args:
        body: the response body as received.
        header_length: the ``Inference-Header-Content-Length`` header: the JSON header
            is that many bytes and the binary tensor data follow; None when the whole
            body is JSON.
        content_encoding: the ``Content-Encoding`` header (gzip, deflate or none).
        received_at: stamped on the result (:attr:`InferResponse.received_at`).

    Raises:
        ResponseDecodeError: naming what is wrong.
    """
    header, binary = _header_and_binary(body, header_length, content_encoding)
    return InferResponse(_decoded(header, binary)[0], received_at)


MAX_REMEMBERED_HEADER_BYTES = 4096
"""The longest JSON header :class:`HttpAnswerDecoder` keeps to compare the next one with
(binary tensors keep Triton's to a few hundred bytes; a header that carries its data as
JSON may be megabytes, and is decoded in full each time instead of kept per model)."""


@dataclass(frozen=True, slots=True)
class _Slot:
    """One entry of a good answer's ``outputs``: where in the binary data its bytes lay
    (None: its data was JSON, in the header itself), and its tensor as decoded — without
    the bytes for one from the binary part (its name, datatype and shape only), so that
    a canary does not hold its last answer's data, which may be megabytes."""

    tensor: Tensor
    binary: tuple[int, int] | None


class HttpAnswerDecoder:
    """:func:`decode_http_infer_response` for the answers of one canary, which repeat.

    A canary sends the same request every time, and the JSON header of each answer is
    byte for byte the last one's (the names, datatypes, shapes and binary sizes); reading
    it again (``json.loads`` and every check of every output) was a third of the CPU the
    engine thread spent on an answer. So the last good answer's header and where each
    output's bytes lay are kept: an answer whose header is the same bytes and whose
    binary part is as long is read by slicing, since every check made of it would pass
    again (BYTES outputs, whose length prefixes are in the binary part, are checked
    again). Anything else — another header, another binary length, a BYTES output that
    no longer reads — is decoded in full, so a changed or broken answer raises exactly
    what :func:`decode_http_infer_response` raises.
    """

    __slots__ = ("_binary_size", "_header", "_limit", "_slots")

    def __init__(self, limits: AnswerLimits = DEFAULT_LIMITS) -> None:
        self._limit = limits.max_answer_bytes
        """The most a compressed answer inflates to (``canary.limits.max_answer_bytes``)."""
        self._header: bytes | None = None
        self._binary_size = 0
        self._slots: tuple[_Slot, ...] = ()

    def decode(
        self,
        body: bytes,
        header_length: str | int | None = None,
        content_encoding: str | None = None,
        received_at: float | None = None,
    ) -> InferResponse:
        """As :func:`decode_http_infer_response`, within this decoder's limit.

        Raises:
            ResponseDecodeError: naming what is wrong.
            AnswerTooLargeError: a compressed body inflates past the limit.
        """
        header, binary = _header_and_binary(body, header_length, content_encoding, self._limit)
        if header == self._header and len(binary) == self._binary_size:
            outputs = self._sliced(binary)
            if outputs is not None:
                return InferResponse(outputs, received_at)
        outputs, slots = _decoded(header, binary)
        if len(header) <= MAX_REMEMBERED_HEADER_BYTES:
            self._header, self._binary_size, self._slots = header, len(binary), slots
        return InferResponse(outputs, received_at)

    def _sliced(self, binary: bytes) -> dict[str, Tensor] | None:
        """The outputs of an answer with the remembered header, from its binary part;
        None when a BYTES output no longer reads (the full decode says why)."""
        outputs: dict[str, Tensor] = {}
        for slot in self._slots:
            tensor = slot.tensor
            if slot.binary is not None:
                raw = binary[slot.binary[0] : slot.binary[1]]
                if tensor.datatype == "BYTES":
                    try:
                        tensor = _shaped(tensor.name, "BYTES", raw, list(tensor.shape))
                    except ResponseDecodeError:
                        return None
                else:
                    tensor = Tensor(tensor.name, tensor.datatype, tensor.shape, raw)
            outputs.setdefault(tensor.name, tensor)
        return outputs


def _header_and_binary(
    body: bytes,
    header_length: str | int | None,
    content_encoding: str | None,
    limit: int | None = None,
) -> tuple[bytes, bytes]:
    """The answer's JSON header and its binary tensor data (empty when all is JSON)."""
    body = decompressed(body, content_encoding, limit)
    if header_length is None:
        return body, b""
    split = _header_length(header_length, len(body))
    return body[:split], body[split:]


def _decoded(header: bytes, binary: bytes) -> tuple[dict[str, Tensor], tuple[_Slot, ...]]:
    """Every output of an answer, checked, by name (the first of a repeated name), and
    every entry of its ``outputs`` as :class:`HttpAnswerDecoder` remembers them."""
    try:
        document = json.loads(header)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        raise ResponseDecodeError(f"the response header is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise ResponseDecodeError("the response header is not a JSON object")
    entries = document.get("outputs", [])
    if not isinstance(entries, list):
        raise ResponseDecodeError("'outputs' is not a list")
    outputs: dict[str, Tensor] = {}
    slots = []
    offset = 0
    for entry in entries:
        tensor, end, in_binary = _http_output(entry, binary, offset)
        if in_binary:
            slots.append(_Slot(replace(tensor, raw=b""), (offset, end)))
        else:
            slots.append(_Slot(tensor, None))
        offset = end
        outputs.setdefault(tensor.name, tensor)
    return outputs, tuple(slots)


def _http_output(entry: object, binary: bytes, offset: int) -> tuple[Tensor, int, bool]:
    """One entry of ``outputs``: its tensor, where the next one's binary data starts
    (outputs with ``binary_data_size`` take their bytes in order), and whether its own
    data came from there."""
    if not isinstance(entry, dict):
        raise ResponseDecodeError("an entry of 'outputs' is not an object")
    name, datatype, shape = _described(entry.get("name"), entry.get("datatype"), entry.get("shape"))
    parameters = entry.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise ResponseDecodeError(f"output {name!r}: 'parameters' is not an object")
    size = parameters.get("binary_data_size")
    if size is not None:
        if not _is_int(size) or size < 0:
            raise ResponseDecodeError(f"output {name!r}: bad binary_data_size {size!r:.40}")
        if offset + size > len(binary):
            raise ResponseDecodeError(
                f"output {name!r}: binary_data_size {size} runs past the "
                f"{len(binary) - offset} bytes of binary data left"
            )
        raw = binary[offset : offset + size]
        return _shaped(name, datatype, raw, shape), offset + size, True
    if "data" in entry:
        raw = _from_json(name, datatype, entry["data"])
    else:
        raise ResponseDecodeError(f"output {name!r} has neither data nor binary_data_size")
    return _shaped(name, datatype, raw, shape), offset, False


def decompressed(body: bytes, content_encoding: str | None, limit: int | None = None) -> bytes:
    """``body`` as sent, inflated per its ``Content-Encoding`` (gzip, deflate or none).

    The HTTP client must hand over the body exactly as it came off the wire (its own
    decompression off): inflating here, once, is what holds a compressed answer to
    ``limit`` bytes (:data:`MAX_DECOMPRESSED_BYTES` unless given), so a gzip bomb is
    ``too_large`` and not an out-of-memory daemon: zlib stops at the limit and the rest
    of the stream is never inflated.

    Raises:
        ResponseDecodeError: an unknown encoding, a corrupt or truncated stream, or junk
            after it.
        AnswerTooLargeError: more than ``limit`` bytes once inflated.
    """
    limit = MAX_DECOMPRESSED_BYTES if limit is None else limit
    encoding = (content_encoding or "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding not in _WBITS:
        raise ResponseDecodeError(f"unsupported Content-Encoding {content_encoding!r:.40}")
    inflater = zlib.decompressobj(_WBITS[encoding])
    try:
        data = inflater.decompress(body, limit)
    except zlib.error as error:
        raise ResponseDecodeError(f"the {encoding} body is corrupt: {error}") from None
    if inflater.unconsumed_tail:  # it stopped at the limit with input left to inflate
        raise AnswerTooLargeError(
            f"the {encoding} body inflates past {_size(limit)}, canary.limits.max_answer_bytes"
        )
    if not inflater.eof or inflater.unused_data:
        raise ResponseDecodeError(f"the {encoding} body is truncated or followed by junk")
    return data


def _size(count: int) -> str:
    """1 GiB, 512 KiB, 100 bytes: a byte count as a person reads it."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift and count % (1 << shift) == 0:
            return f"{count >> shift} {unit}"
    return f"{count} bytes"


def _header_length(value: str | int, body_size: int) -> int:
    text = str(value).strip() if not isinstance(value, int) else str(value)
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise ResponseDecodeError(f"bad Inference-Header-Content-Length {str(value)[:40]!r}")
    length = int(text)
    if length > body_size:
        raise ResponseDecodeError(
            f"Inference-Header-Content-Length {length} is past the body's {body_size} bytes"
        )
    return length


def _from_json(name: str, datatype: str, data: object) -> bytes:
    """``data`` as the v2 JSON form writes it (a flat or row-major nested list), as bytes."""
    if not isinstance(data, list):
        raise ResponseDecodeError(f"output {name!r}: 'data' is not a list")
    flat = _flattened(data)
    if datatype == "BYTES":
        texts = [item for item in flat if isinstance(item, str)]
        if len(texts) != len(flat):
            raise ResponseDecodeError(f"output {name!r}: BYTES data must be strings")
        return serialize_bytes(text.encode("utf-8", "surrogatepass") for text in texts)
    wanted: type | tuple[type, ...] = bool if datatype == "BOOL" else (int, float)
    if not all(isinstance(item, wanted) for item in flat) or (
        datatype != "BOOL" and any(isinstance(item, bool) for item in flat)
    ):
        raise ResponseDecodeError(f"output {name!r}: {datatype} data holds a wrong type")
    return _packed(name, datatype, flat)


def _packed(name: str, datatype: str, values: Sequence[object]) -> bytes:
    """1e300 as FP16 becomes inf, as Triton would; 300 as INT8 or 1e400 as an integer is
    an error, as it was with numpy."""
    try:
        return pack(datatype, values)
    except ElementError as error:
        raise ResponseDecodeError(f"output {name!r}: {error}") from None


def _flattened(data: list[object]) -> list[object]:
    """The leaves of nested lists in order; a loop, as JSON may nest deeper than the
    Python stack has room for."""
    flat: list[object] = []
    stack: list[Iterator[object]] = [iter(data)]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
        elif isinstance(item, list):
            stack.append(iter(item))
        else:
            flat.append(item)
    return flat


# -- gRPC --------------------------------------------------------------------------------


def decode_grpc_infer_response(response: Any, received_at: float | None = None) -> InferResponse:
    """Decodes a ``ModelInferResponse`` (its serialized bytes, or a message with the
    generated type's fields), stamped ``received_at``.

    Each output's data is ``raw_output_contents[i]`` when the server sent raw contents
    (Triton always does), else the typed ``contents`` field for its datatype.

    Raises:
        ResponseDecodeError: naming what is wrong.
    """
    if isinstance(response, bytes | bytearray | memoryview):
        try:  # read by hand: service_pb2 would import grpc and tritonclient.grpc
            response = decode_infer_response(bytes(response))
        except ProtobufDecodeError as error:
            raise ResponseDecodeError(f"not a ModelInferResponse: {error}") from None
    raw = list(response.raw_output_contents)
    outputs: dict[str, Tensor] = {}
    for index, output in enumerate(response.outputs):
        name, datatype, shape = _described(output.name, output.datatype, list(output.shape))
        if index < len(raw):
            data = bytes(raw[index])
        elif datatype in GRPC_TYPED_CONTENTS:
            values = list(getattr(output.contents, GRPC_TYPED_CONTENTS[datatype]))
            if datatype == "BYTES":
                data = serialize_bytes(bytes(value) for value in values)
            else:  # 70000 in int_contents as INT16 is refused
                data = _packed(name, datatype, values)
        else:  # FP16 and BF16 have no typed field: only raw data carries them
            data = b""
        outputs.setdefault(name, _shaped(name, datatype, data, shape))
    return InferResponse(outputs, received_at)


# -- shared ------------------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _described(name: object, datatype: object, shape: object) -> tuple[str, str, list[int]]:
    """Checks an output's name, datatype and shape (the same fields in both protocols)."""
    if not isinstance(name, str) or not name:
        raise ResponseDecodeError(f"an output has no name (got {name!r:.40})")
    if not isinstance(datatype, str) or datatype not in TRITON_DATATYPES:
        raise ResponseDecodeError(f"output {name!r}: unknown datatype {datatype!r:.40}")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise ResponseDecodeError(f"output {name!r}: bad shape {shape!r:.60}")
    if len(shape) > 32:
        raise ResponseDecodeError(f"output {name!r}: {len(shape)} dimensions is too many")
    return name, datatype, shape


_NUMPY_ITEM_SIZES = {**ITEM_SIZES, "BYTES": 8}  # an object array holds pointers
_LARGEST_ARRAY = sys.maxsize
"""numpy refuses arrays of more bytes than this (even empty ones: [0, 2**62, 2**62])."""


def _shaped(name: str, datatype: str, raw: bytes, shape: list[int]) -> Tensor:
    """Output ``name`` once its bytes are whole elements (BYTES: length-prefixed ones,
    each within the data) that fill ``shape`` exactly."""
    try:
        count = element_count(datatype, raw)
    except ElementError as error:
        raise ResponseDecodeError(f"output {name!r}: {error}") from None
    needed = math.prod(shape)
    if count != needed:
        raise ResponseDecodeError(
            f"output {name!r}: shape {shape} needs {needed} elements, the data holds {count}"
        )
    if math.prod(d for d in shape if d) * _NUMPY_ITEM_SIZES[datatype] > _LARGEST_ARRAY:
        raise ResponseDecodeError(f"output {name!r}: shape {shape}: array is too big")
    return Tensor(name, datatype, tuple(shape), raw)
