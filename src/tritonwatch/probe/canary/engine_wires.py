"""What one connection of the canary engine speaks, and what it hands its canary back.

Every connection the engine (:mod:`~tritonwatch.probe.canary.engine`) drives speaks one
protocol, a :class:`Wire`: HTTP/1.1 keep-alive (:class:`Http1Wire`), a unary gRPC call
over a kept HTTP/2 session (:class:`GrpcWire`), a stream
(:mod:`~tritonwatch.probe.canary.engine_stream`), or any of these inside TLS
(:mod:`~tritonwatch.probe.canary.engine_tls`). The engine moves bytes; a wire says what
to send and when an answer is whole. Each answer goes to the model's
:class:`EngineCanary`, which judges and records it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tritonwatch.probe.canary.engine_http1 import HeadedConnection
from tritonwatch.probe.canary.engine_stream import StreamAnswer
from tritonwatch.wire.http1 import HttpProtocolError
from tritonwatch.wire.http2 import ClientSession, GrpcReply, Http2ClosedError, UnaryRequest
from tritonwatch.wire.limits import HttpRequest

HttpAnswer = tuple[int, dict[str, str], bytes, float]
"""(status, the headers the decoder needs, the body as sent, when its last byte came)."""


@dataclass(frozen=True, slots=True)
class GrpcAnswer:
    """A finished gRPC call as it came back, and when its last byte did."""

    reply: GrpcReply
    received: float


RawAnswer = HttpAnswer | GrpcAnswer | StreamAnswer
"""What the engine hands its canary for one answered request (or one stream)."""


def answer_body(answer: RawAnswer) -> bytes:
    """The body of an answer the engine read (the start of what could not be decoded)."""
    if isinstance(answer, GrpcAnswer):
        return answer.reply.payload
    if isinstance(answer, tuple):
        return answer[2]
    return b""


class EngineCanary(Protocol):
    """What the engine asks of the canary it sends for
    (:class:`~tritonwatch.probe.canary.model_canary.ModelCanary` is one)."""

    def next_gap(self) -> float:
        """Seconds from one intended send to the next."""
        ...

    def may_send(self, intended: float) -> bool:
        """Whether to send at ``intended`` (False: paused, or the breaker is open)."""
        ...

    def record(self, intended: float, answer: RawAnswer | BaseException, woke: float) -> None:
        """Judges and records one request's answer or failure (on the engine's thread);
        ``woke`` is when the engine took the request up, at or after ``intended``."""
        ...


class Wire(Protocol):
    """What one connection speaks: the bytes of each request, and its answers read back."""

    def start(self) -> bytes:
        """The bytes to write for the next request (control frames owed included)."""
        ...

    def feed(self, data: bytes, received: float) -> RawAnswer | None:
        """Reads an answer's bytes; the answer once whole, stamped ``received``."""
        ...

    def take_output(self) -> bytes:
        """Bytes owed to the server meanwhile (HTTP/2 acknowledgements, window updates)."""
        ...

    def reusable(self) -> bool:
        """Whether the connection may carry the next request, after its answer."""
        ...

    def idle_data(self, data: bytes) -> bool:
        """Reads what came while the connection idled; False: it cannot be used again."""
        ...


class Http1Wire:
    """HTTP/1.1 keep-alive: the same request each time, each answer read by a fresh parser
    unless it repeats the last one's head.

    A canary's answers repeat: the same status line and headers, the same length, read
    whole in one ``recv``. Parsing that head again (a fresh parser, the head decoded and
    split, every header looked at) was a third of the engine's CPU on an answer, since
    at one request a second the thread runs with cold caches and every line of Python
    counts several times over. So an answer read in one piece whose bytes begin with the
    last whole answer's head, and are as many, is that head's status and headers with
    the rest as its body: exactly what the parser would have made of it. Anything else
    (another head or length, an answer in several reads, chunked) goes to the parser.
    """

    def __init__(self, request: HttpRequest) -> None:
        self._request = request
        self._parser: HeadedConnection | None = None
        """The parser of the answer being read, made when its first read is no repeat."""
        self._head = b""
        """The last answer read in one piece: its head's bytes, empty line included…"""
        self._size = -1
        """…its whole length…"""
        self._status = 0
        self._headers: dict[str, str] = {}
        """…and its status and kept headers (the last answer's, however it was read)."""

    def start(self) -> bytes:
        self._parser = None
        return self._request.data

    def feed(self, data: bytes, received: float) -> RawAnswer | None:
        if self._parser is None and len(data) == self._size and data.startswith(self._head):
            return self._status, self._headers, data[len(self._head) :], received
        parser = self._parser
        whole_read = parser is None
        if parser is None:
            parser = self._parser = HeadedConnection.for_request(self._request)
        parsed = parser.feed(data)
        if parsed is None:
            return None
        status, body = parsed
        self._status, self._headers = status, parser.headers
        head = parser.head
        if whole_read and head is not None and len(data) == head.length + len(body):
            self._head, self._size = data[: head.length], len(data)  # (never chunked)
        return status, self._headers, body, received

    def take_output(self) -> bytes:
        return b""

    def reusable(self) -> bool:
        return self._headers.get("connection", "").lower() != "close"

    def idle_data(self, data: bytes) -> bool:
        return False  # bytes nobody asked for


class GrpcWire:
    """A unary gRPC call over one HTTP/2 session, kept from one call to the next."""

    def __init__(self, request: UnaryRequest) -> None:
        self._request = request
        self._session = ClientSession()

    def start(self) -> bytes:
        return self._session.start(self._request)

    def feed(self, data: bytes, received: float) -> RawAnswer | None:
        reply = self._session.feed(data)
        return None if reply is None else GrpcAnswer(reply, received)

    def take_output(self) -> bytes:
        return self._session.take_output()

    def reusable(self) -> bool:
        return self._session.can_send(self._request)

    def idle_data(self, data: bytes) -> bool:
        """PINGs, SETTINGS and window updates come while a connection idles (gRPC servers
        probe the bandwidth after each call): read, they leave it usable; a GOAWAY or
        a broken frame does not."""
        try:
            self._session.feed(data)
        except (HttpProtocolError, Http2ClosedError):
            return False
        return not self._session.going_away


class VaryingRequests:
    """One model's requests made afresh for every send, on the engine's thread (a
    stateful model's flags, a cached model's unique bytes, input-data samples in turn:
    probe/canary/request_source.py). A plain model's canary sends one request built
    once instead (:class:`Http1Wire`, :class:`GrpcWire`), which costs nothing per send.
    """

    def __init__(self, make: Callable[[], HttpRequest | UnaryRequest], *, grpc: bool) -> None:
        """``make``: the next request, a gRPC call when ``grpc``, else an HTTP/1.1 one."""
        self.make = make
        self.grpc = grpc

    def new_wire(self) -> Wire:
        """The protocol state of a new connection (its requests made as each is sent)."""
        return VaryingGrpcWire(self.make) if self.grpc else VaryingHttp1Wire(self.make)


_NO_CALL = UnaryRequest(b"", (), 0)
"""What a varying gRPC wire holds before its first call is made."""


class VaryingHttp1Wire(Http1Wire):
    """:class:`Http1Wire` whose every request is made as it is sent."""

    def __init__(self, make: Callable[[], HttpRequest | UnaryRequest]) -> None:
        super().__init__(HttpRequest(b""))
        self._make = make

    def start(self) -> bytes:
        request = self._make()
        assert isinstance(request, HttpRequest)
        self._request = request
        return super().start()


class VaryingGrpcWire(GrpcWire):
    """:class:`GrpcWire` whose every call is made as it is sent."""

    def __init__(self, make: Callable[[], HttpRequest | UnaryRequest]) -> None:
        super().__init__(_NO_CALL)
        self._make = make

    def start(self) -> bytes:
        request = self._make()
        assert isinstance(request, UnaryRequest)
        self._request = request
        return super().start()
