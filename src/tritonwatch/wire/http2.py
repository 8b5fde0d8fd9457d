"""The client side of plaintext HTTP/2 (h2c, prior knowledge) a unary gRPC call needs, no I/O.

Why not ``grpc.aio``: on real Triton its per-call machinery (a call object, its
futures, the completion queue's turn through the event loop) left the gRPC canary
0.75 ms over perf_analyzer's p95, where the plain-HTTP canary, sending bytes built once
from one thread, is within 0.17 ms. So the canary's engine
(:mod:`~tritonwatch.probe.canary.engine`) speaks gRPC itself, with what it already does
for HTTP/1: one request's bytes built once, one exchange at a time per connection.

What is here is the minimum of RFC 9113 such a client needs, no more:

* the connection preface with SETTINGS (no server push, a stream window of
  ``canary.limits.http2_window``, 1 MiB unless configured) and a connection
  WINDOW_UPDATE to the same, so the server rarely waits on flow control yet never has
  more than that in flight unread; what the answers consume is given back once half of
  a window is used;
* each request's HEADERS and DATA frames built once (:func:`grpc_unary_request`), the
  header block in HPACK literals without indexing, so no encoder state exists and only
  the stream id is patched per send; odd stream ids, one stream at a time;
* answers read frame by frame, split anywhere: SETTINGS and PING acknowledged, GOAWAY
  and RST_STREAM made errors, HEADERS (+CONTINUATION) decoded by a real HPACK decoder
  (``hpack``: the server's encoder indexes and Huffman-codes as it likes), DATA
  gathered, and the gRPC message, ``grpc-status`` and ``grpc-message`` (percent-decoded)
  taken from the trailers or a trailers-only answer; a streaming call's messages
  (``ModelStreamInfer``: one request, any number of responses, then the trailers) are
  split off its DATA as each arrives, for :meth:`ClientSession.take_messages`;
* every size the server decides held to the call's
  :class:`~tritonwatch.wire.limits.AnswerLimits`: a gRPC message whose length
  prefix, or a stream whose DATA, passes ``max_answer_bytes``, and a header block
  (CONTINUATION frames included, and its decoded fields) past ``max_header_bytes``,
  raise :class:`~tritonwatch.wire.limits.AnswerTooLargeError` as soon as the
  prefix or the frame says so, before the rest is read.

A request larger than the default flow-control window (64 KiB) is never built here:
the canary sends those on ``grpc.aio``, which waits for the server's window updates.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import unquote

from tritonwatch.wire.grpc_codes import ERROR_NAMES, GRPC_STATUS_NAMES, HTTP_TO_GRPC, UNKNOWN
from tritonwatch.wire.http1 import HttpProtocolError
from tritonwatch.wire.limits import DEFAULT_LIMITS, AnswerLimits, AnswerTooLargeError

if TYPE_CHECKING:
    import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS = 0x0, 0x1, 0x2, 0x3, 0x4
PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0x5, 0x6, 0x7, 0x8, 0x9
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
SETTINGS_HEADER_TABLE_SIZE, SETTINGS_ENABLE_PUSH = 0x1, 0x2
SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE = 0x4, 0x5
DEFAULT_WINDOW = 65_535
"""Every flow-control window before SETTINGS or WINDOW_UPDATE say otherwise."""
MAX_WINDOW = 2**31 - 1
MAX_FRAME = 16_384
"""The largest frame either side may send until told more: this client never tells
more, and never sends more."""
MAX_STREAM_ID = 2**31 - 1
_STREAM_ID = struct.Struct(">I")
_GRPC_PREFIX = struct.Struct(">BI")
MAX_DECODED_BLOCKS = 16
"""Distinct header blocks remembered per connection (a server sends a handful)."""
MAX_REQUEST_DATA = DEFAULT_WINDOW
"""DATA bytes a request may carry: what a fresh connection's windows let it send at once."""


class Http2Error(HttpProtocolError):
    """The peer broke HTTP/2 or gRPC framing (or is no HTTP/2 server): a bad response,
    as an unreadable HTTP/1.1 answer is."""


class Http2ClosedError(ConnectionError):
    """The server reset the stream or is going away before answering it."""


def _frame_head(kind: int, flags: int, stream: int, length: int) -> bytes:
    return struct.pack(">I", length)[1:] + bytes((kind, flags)) + _STREAM_ID.pack(stream)


def frame_bytes(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One frame: its 9-byte header (length, type, flags, stream id), then ``payload``."""
    return _frame_head(kind, flags, stream, len(payload)) + payload


def client_preface(window: int = DEFAULT_LIMITS.http2_window) -> bytes:
    """What a client sends first on a connection: the magic, SETTINGS (no push, streams
    of ``window`` bytes) and a WINDOW_UPDATE taking the connection's window to it."""
    settings = struct.pack(">HIHI", SETTINGS_ENABLE_PUSH, 0, SETTINGS_INITIAL_WINDOW_SIZE, window)
    grow = window - DEFAULT_WINDOW
    update = frame_bytes(WINDOW_UPDATE, 0, 0, _STREAM_ID.pack(grow)) if grow > 0 else b""
    return PREFACE + frame_bytes(SETTINGS, 0, 0, settings) + update


def hpack_integer(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """RFC 7541 §5.1: ``value`` in a ``prefix_bits`` prefix of a byte starting ``first``."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_literal(name: str, value: str) -> bytes:
    """A header field as a literal without indexing, new name, no Huffman (RFC 7541
    §6.2.2): it touches neither side's dynamic table, so no encoder state exists."""
    raw_name, raw_value = name.encode("ascii"), value.encode("ascii")
    return (
        b"\x00"
        + hpack_integer(len(raw_name), 7)
        + raw_name
        + hpack_integer(len(raw_value), 7)
        + raw_value
    )


def grpc_timeout(seconds: float) -> str:
    """The ``grpc-timeout`` header's value: at most 8 digits, in the finest unit that fits."""
    for unit, scale in (("m", 1e3), ("S", 1.0), ("M", 1 / 60), ("H", 1 / 3600)):
        amount = max(1, -int(-seconds * scale // 1))  # rounded up: never shorter than asked
        if amount < 10**8:
            return f"{amount}{unit}"
    return "99999999H"


@dataclass(frozen=True, slots=True)
class UnaryRequest:
    """One unary call's HEADERS and DATA frames, built once; :meth:`for_stream` patches
    the stream id in."""

    frames: bytes
    id_offsets: tuple[int, ...]
    """Where each frame's stream id sits in ``frames``."""
    data_length: int
    """The flow-controlled bytes the call sends (its DATA payloads)."""
    limits: AnswerLimits = DEFAULT_LIMITS
    """What its answer is read within (a session adopts them with its first call)."""

    def for_stream(self, stream: int) -> bytes:
        out = bytearray(self.frames)
        for offset in self.id_offsets:
            _STREAM_ID.pack_into(out, offset, stream)
        return bytes(out)


def grpc_unary_request(
    authority: str,
    path: str,
    message: bytes,
    timeout: float,
    limits: AnswerLimits = DEFAULT_LIMITS,
) -> UnaryRequest:
    """The frames of a unary gRPC call of ``path`` carrying ``message``.

    Raises:
        ValueError: the framed message is larger than :data:`MAX_REQUEST_DATA`.
    """
    body = _GRPC_PREFIX.pack(0, len(message)) + message
    if len(body) > MAX_REQUEST_DATA:
        raise ValueError(f"a {len(body)}-byte gRPC request exceeds the {MAX_REQUEST_DATA} window")
    fields = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        ("grpc-timeout", grpc_timeout(timeout)),
    ]
    block = b"".join(hpack_literal(name, value) for name, value in fields)
    if len(block) > MAX_FRAME:
        raise ValueError("the request's header block does not fit one frame")
    chunks = [body[start : start + MAX_FRAME] for start in range(0, len(body), MAX_FRAME)]
    out = bytearray(frame_bytes(HEADERS, END_HEADERS, 0, block))
    offsets = [5]
    for index, chunk in enumerate(chunks):
        offsets.append(len(out) + 5)
        last = index == len(chunks) - 1
        out += frame_bytes(DATA, END_STREAM if last else 0, 0, chunk)
    return UnaryRequest(bytes(out), tuple(offsets), len(body), limits)


@dataclass(frozen=True, slots=True)
class GrpcReply:
    """A finished unary call: its gRPC status, the server's message, the response message."""

    status: int
    message: str
    payload: bytes

    @property
    def status_name(self) -> str:
        """As ``grpc.StatusCode`` names it (``StatusCode.NOT_FOUND``); an unknown code by number."""
        known = 0 <= self.status < len(GRPC_STATUS_NAMES)
        return f"StatusCode.{GRPC_STATUS_NAMES[self.status] if known else self.status}"


@dataclass(slots=True)
class _Stream:
    """The one call in flight: what has come back for it so far."""

    id: int
    streaming: bool = False
    """Its messages are handed on as they arrive (:meth:`ClientSession.take_messages`)."""
    headers_seen: bool = False
    data: bytearray = field(default_factory=bytearray)
    received: int = 0
    """DATA bytes of a streaming call so far (its messages leave ``data`` as they come)."""
    unacknowledged: int = 0
    """DATA bytes received on it and not yet given back by a WINDOW_UPDATE."""


class ClientSession:
    """One HTTP/2 connection's client state: frames in, the finished call out, and the
    control frames owed to the server (:meth:`take_output`) in between."""

    def __init__(self, window: int | None = None, limits: AnswerLimits | None = None) -> None:
        """``limits``: what answers are read within; None: the first call's
        (:attr:`UnaryRequest.limits`). ``window``: the window advertised, when not the
        limits' ``http2_window``."""
        import hpack  # noqa: PLC0415 - 0.9 MiB a daemon without gRPC canaries never needs

        self._hpack = hpack
        self._asked_window = window
        self._limits = limits or DEFAULT_LIMITS
        self._adopt_limits = limits is None
        self._window = 0
        """The windows this client gives the server (given back at half used)."""
        self._decoder: hpack.Decoder = hpack.Decoder()
        self._hpack_error: type[Exception] = hpack.HPACKError
        self._apply_limits(self._limits)
        self._decoded: dict[bytes, Mapping[str, str]] = {}
        """Header blocks decoded against the current dynamic table (:meth:`_fields`)."""
        self._buffer = bytearray()
        self._output = bytearray()
        self._started = False
        self._settings_seen = False
        self._next_stream = 1
        self._stream: _Stream | None = None
        self._continuing: tuple[int, int, bytearray] | None = None
        """(stream, flags of its HEADERS, the block so far) while CONTINUATION is due."""
        self._send_window = DEFAULT_WINDOW
        """The connection's window for what this client sends."""
        self._peer_stream_window = DEFAULT_WINDOW
        self._unacknowledged = 0
        """DATA bytes the connection received and not yet gave back."""
        self._messages: list[bytes] = []
        """A streaming call's whole messages not yet taken."""
        self.going_away = False
        """The server sent GOAWAY: no new call may start here."""

    def _apply_limits(self, limits: AnswerLimits) -> None:
        self._limits = limits
        window = self._asked_window if self._asked_window is not None else limits.http2_window
        self._window = min(max(window, DEFAULT_WINDOW), MAX_WINDOW)
        self._decoder.max_header_list_size = limits.max_header_bytes

    def can_send(self, request: UnaryRequest) -> bool:
        """Whether ``request`` may start on this connection now (no call in flight, no
        GOAWAY, stream ids and flow-control window left)."""
        window = min(self._send_window, self._peer_stream_window)
        return (
            self._stream is None
            and not self.going_away
            and self._next_stream <= MAX_STREAM_ID
            and request.data_length <= window
        )

    def start(self, request: UnaryRequest, *, streaming: bool = False) -> bytes:
        """The bytes to write for ``request`` on the next stream: the preface on a new
        connection, any control frames owed, then its frames. ``streaming``: the call
        answers with any number of messages, each taken as it arrives
        (:meth:`take_messages`), and its reply carries none.

        Raises:
            ValueError: :meth:`can_send` says no.
        """
        if not self.can_send(request):
            raise ValueError("this connection cannot start the call")
        stream = self._next_stream
        self._next_stream += 2
        self._stream = _Stream(stream, streaming)
        self._messages = []
        self._send_window -= request.data_length
        if not self._started and self._adopt_limits:
            self._apply_limits(request.limits)
        out = b"" if self._started else client_preface(self._window)
        self._started = True
        return out + self.take_output() + request.for_stream(stream)

    def take_output(self) -> bytes:
        """Control frames owed to the server (acknowledgements, window updates)."""
        out, self._output = bytes(self._output), bytearray()
        return out

    def take_messages(self) -> list[bytes]:
        """The streaming call's messages whole since the last take, in order (those
        the bytes fed last completed, its reply's read included)."""
        out, self._messages = self._messages, []
        return out

    def feed(self, data: bytes) -> GrpcReply | None:
        """Reads ``data`` (any split of the server's bytes); the call's reply once its
        stream ended, else None. Frames after the reply are read too.

        Raises:
            Http2Error: a frame breaks HTTP/2 or gRPC framing.
            Http2ClosedError: the server reset the call's stream or went away without it.
        """
        self._buffer += data
        reply = None
        while len(self._buffer) >= 9:
            length = int.from_bytes(self._buffer[:3], "big")
            if length > MAX_FRAME:
                raise Http2Error(f"a {length}-byte frame is over {MAX_FRAME} (no HTTP/2 server?)")
            if len(self._buffer) < 9 + length:
                break
            kind, flags = self._buffer[3], self._buffer[4]
            stream = _STREAM_ID.unpack_from(self._buffer, 5)[0] & MAX_STREAM_ID
            payload = bytes(self._buffer[9 : 9 + length])
            start = bytes(self._buffer[:120])
            del self._buffer[: 9 + length]
            try:
                done = self._frame(kind, flags, stream, payload)
            except HttpProtocolError as error:
                error.answer_start = start  # the frame it could not read
                raise
            reply = done if done is not None else reply
        return reply

    def _frame(self, kind: int, flags: int, stream: int, payload: bytes) -> GrpcReply | None:
        if not self._settings_seen and kind != SETTINGS:
            raise Http2Error(f"the server's first frame is type {kind}, not SETTINGS")
        if self._continuing is not None and kind != CONTINUATION:
            raise Http2Error(f"a frame of type {kind} came where CONTINUATION was due")
        handler = _HANDLERS.get(kind)
        return handler(self, flags, stream, payload) if handler is not None else None

    def _settings(self, flags: int, stream: int, payload: bytes) -> None:
        if stream:
            raise Http2Error("SETTINGS on a stream")
        if flags & ACK:
            if payload:
                raise Http2Error("a SETTINGS acknowledgement with a payload")
            return
        if len(payload) % 6:
            raise Http2Error(f"SETTINGS of {len(payload)} bytes")
        for offset in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HI", payload, offset)
            if key == SETTINGS_INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise Http2Error(f"an initial window of {value}")
                self._peer_stream_window = value
        self._settings_seen = True
        self._output += frame_bytes(SETTINGS, ACK, 0)

    def _ping(self, flags: int, stream: int, payload: bytes) -> None:
        if stream or len(payload) != 8:
            raise Http2Error("a PING on a stream or not of 8 bytes")
        if not flags & ACK:
            self._output += frame_bytes(PING, ACK, 0, payload)

    def _goaway(self, _flags: int, stream: int, payload: bytes) -> None:
        if stream or len(payload) < 8:
            raise Http2Error("a GOAWAY on a stream or under 8 bytes")
        last, code = struct.unpack_from(">II", payload)
        self.going_away = True
        current = self._stream
        if current is not None and current.id > last & MAX_STREAM_ID:
            debug = payload[8:].decode("utf-8", "replace")
            raise Http2ClosedError(
                f"the server went away before the call ({_error_name(code)}"
                + (f": {debug})" if debug else ")")
            )

    def _rst_stream(self, _flags: int, stream: int, payload: bytes) -> None:
        if not stream or len(payload) != 4:
            raise Http2Error("an RST_STREAM on stream 0 or not of 4 bytes")
        if self._stream is not None and stream == self._stream.id:
            self._stream = None
            code = _STREAM_ID.unpack(payload)[0]
            raise Http2ClosedError(f"the server reset the call's stream ({_error_name(code)})")

    def _window_update(self, _flags: int, stream: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise Http2Error("a WINDOW_UPDATE not of 4 bytes")
        increment = _STREAM_ID.unpack(payload)[0] & MAX_WINDOW
        if not increment:
            raise Http2Error("a WINDOW_UPDATE of 0")
        if not stream:
            self._send_window += increment
            if self._send_window > MAX_WINDOW:
                raise Http2Error("the server's window updates overflow the window")

    def _push_promise(self, _flags: int, _stream: int, _payload: bytes) -> None:
        raise Http2Error("a PUSH_PROMISE, though push is off")

    def _data(self, flags: int, stream: int, payload: bytes) -> GrpcReply | None:
        if not stream:
            raise Http2Error("DATA on stream 0")
        self._unacknowledged += len(payload)
        if self._unacknowledged >= self._window // 2:
            self._output += _window_update(0, self._unacknowledged)
            self._unacknowledged = 0
        current = self._stream
        if current is None or stream != current.id:
            return None  # a call abandoned earlier: its bytes still count against the window
        if not current.headers_seen:
            raise Http2Error("DATA before the response headers")
        current.data += _unpadded(flags, payload)
        if current.streaming:
            self._messages += _whole_messages(current.data, self._limits)
            current.received += len(payload)
            self._limits.check_answer(current.received, "a gRPC stream's DATA")
        else:
            self._check_message(current.data)
        current.unacknowledged += len(payload)
        if current.unacknowledged >= self._window // 2 and not flags & END_STREAM:
            self._output += _window_update(stream, current.unacknowledged)
            current.unacknowledged = 0
        if flags & END_STREAM:
            self._stream = None
            return GrpcReply(UNKNOWN, "the stream ended without trailers", b"")
        return None

    def _headers(self, flags: int, stream: int, payload: bytes) -> GrpcReply | None:
        if not stream:
            raise Http2Error("HEADERS on stream 0")
        block = _unpadded(flags, payload)
        if flags & PRIORITY_FLAG:
            if len(block) < 5:
                raise Http2Error("HEADERS too short for their priority")
            block = block[5:]
        if not flags & END_HEADERS:
            self._limits.check_header(len(block), "an HTTP/2 header block")
            self._continuing = (stream, flags, bytearray(block))
            return None
        return self._header_block(stream, flags, block)

    def _continuation(self, flags: int, stream: int, payload: bytes) -> GrpcReply | None:
        if self._continuing is None or self._continuing[0] != stream:
            raise Http2Error("a CONTINUATION that continues nothing")
        _, first_flags, block = self._continuing
        block += payload
        self._limits.check_header(len(block), "an HTTP/2 header block")
        if not flags & END_HEADERS:
            return None
        self._continuing = None
        return self._header_block(stream, first_flags, bytes(block))

    def _fields(self, block: bytes) -> Mapping[str, str]:
        """A header block's fields, decoded once per distinct block while the table holds.

        A gRPC server indexes its few response headers and trailers on first use and
        from then on sends the same few bytes of indexed references in every answer;
        pure-Python HPACK decoding of those was a quarter of a gRPC call's client CPU.
        The same bytes mean the same fields only against the same dynamic table, so a
        block that changed the table is not kept, and every kept one is dropped then.
        """
        known = self._decoded.get(block)
        if known is not None:
            return known
        table = self._decoder.header_table
        before = (table.maxsize, tuple(table.dynamic_entries))
        try:
            fields = {
                _text(name): _text(value) for name, value in self._decoder.decode(block, raw=True)
            }
        except self._hpack.OversizedHeaderListError:
            raise AnswerTooLargeError(
                "an HTTP/2 header list decodes to over canary.limits.max_header_bytes "
                f"({self._limits.max_header_bytes})"
            ) from None
        except self._hpack_error as error:
            raise Http2Error(f"an undecodable header block: {error}") from None
        if (table.maxsize, tuple(table.dynamic_entries)) != before:
            self._decoded.clear()
        elif len(self._decoded) < MAX_DECODED_BLOCKS:
            self._decoded[block] = fields
        return fields

    def _check_message(self, data: bytearray) -> None:
        """A unary call's message refused as soon as its length prefix (or its DATA)
        says it is over ``max_answer_bytes``: the rest is never read."""
        limits = self._limits
        if len(data) >= 5:
            limits.check_answer(_GRPC_PREFIX.unpack_from(data)[1], "a gRPC message")
        limits.check_answer(len(data) - 5, "a gRPC message's DATA")

    def _header_block(self, stream: int, flags: int, block: bytes) -> GrpcReply | None:
        """Decodes every block, whichever stream it is for: the decoder's dynamic table
        must see them all. A block for the call is its response headers, then its
        trailers (or both in one: a trailers-only answer)."""
        fields = self._fields(block)
        current = self._stream
        if current is None or stream != current.id:
            return None
        ended = bool(flags & END_STREAM)
        if not current.headers_seen:
            status = fields.get(":status", "")
            if status != "200":
                self._stream = None
                code = HTTP_TO_GRPC.get(int(status) if status.isdigit() else 0, UNKNOWN)
                return GrpcReply(code, f"Received http2 header with status: {status}", b"")
            current.headers_seen = True
            if not ended:
                return None
        elif not ended:
            raise Http2Error("a second header block that does not end the stream")
        self._stream = None
        return _reply(fields, bytes(current.data))


_HANDLERS = {
    DATA: ClientSession._data,
    HEADERS: ClientSession._headers,
    CONTINUATION: ClientSession._continuation,
    SETTINGS: ClientSession._settings,
    PING: ClientSession._ping,
    GOAWAY: ClientSession._goaway,
    RST_STREAM: ClientSession._rst_stream,
    WINDOW_UPDATE: ClientSession._window_update,
    PUSH_PROMISE: ClientSession._push_promise,
}
"""What each frame type does; PRIORITY and unknown types are passed over (RFC 9113 §5.5)."""


def _reply(trailers: Mapping[str, str], data: bytes) -> GrpcReply:
    """The call's outcome from its trailers and the gathered DATA (one gRPC message)."""
    raw_status = trailers.get("grpc-status")
    message = unquote(trailers.get("grpc-message", ""), errors="replace")
    if raw_status is None or not raw_status.isdigit():
        return GrpcReply(
            UNKNOWN, message or f"no valid grpc-status in the trailers ({raw_status})", b""
        )
    status = int(raw_status)
    if status != 0 or not data:
        return GrpcReply(status, message, b"")
    if len(data) < 5:
        raise Http2Error(f"a gRPC message of {len(data)} bytes, under its 5-byte prefix")
    compressed, length = _GRPC_PREFIX.unpack_from(data)
    if compressed:
        raise Http2Error("a compressed gRPC message, though no encoding was offered")
    if length != len(data) - 5:
        raise Http2Error(f"a gRPC message of {len(data) - 5} bytes says it has {length}")
    return GrpcReply(status, message, data[5:])


def _whole_messages(data: bytearray, limits: AnswerLimits = DEFAULT_LIMITS) -> list[bytes]:
    """The gRPC messages ``data`` holds whole, taken out of it (a partial one stays);
    one whose length prefix is over ``max_answer_bytes`` is refused at once."""
    messages = []
    while len(data) >= 5:
        compressed, length = _GRPC_PREFIX.unpack_from(data)
        if compressed:
            raise Http2Error("a compressed gRPC message, though no encoding was offered")
        limits.check_answer(length, "a gRPC message")
        if len(data) < 5 + length:
            break
        messages.append(bytes(data[5 : 5 + length]))
        del data[: 5 + length]
    return messages


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("latin-1")


def _unpadded(flags: int, payload: bytes) -> bytes:
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise Http2Error("padding as long as the frame")
    return payload[1 : len(payload) - payload[0]]


def _window_update(stream: int, increment: int) -> bytes:
    return frame_bytes(WINDOW_UPDATE, 0, stream, _STREAM_ID.pack(increment))


def _error_name(code: int) -> str:
    return ERROR_NAMES[code] if 0 <= code < len(ERROR_NAMES) else f"error {code}"
