"""Streamed HTTP canary requests (``generate_stream``, OpenAI) read on the engine's thread.

On the event loop (:class:`~tritonwatch.probe.stream.stream_canary.HttpStream`) every read of
a stream went through a protocol callback, a queue put and get, a generator step and
the loop's turns around each: a handful of streaming canaries multiplied the daemon's
CPU several times over. Here the engine's ``select()`` loop
(:mod:`~tritonwatch.probe.canary.engine`) reads the socket, with the kernel's arrival stamp
(:mod:`~tritonwatch.probe.canary.arrival_stamps`), and :class:`HttpStreamWire` takes each
read through

    response head → ChunkedDecoder → SseParser → codec.decode → StreamClock.piece

on the same thread. Several events in one read share its stamp: that is all the
kernel says of when they came. The canary hears once a stream, when it ended
(:class:`StreamAnswer`: its clock, its end, or how it failed), through the same
``record`` the unary answers take.

The outcomes are the stream sweep's too (:meth:`ConnectionPool.stream
<tritonwatch.sweep.http_stream_pool.ConnectionPool.stream>`): a non-200 head is the
server's error from its body, a body cut short a connection error, a body without a
length ends with its connection, an event left unfinished or an event that is no
JSON a bad response, an in-band ``{"error"}`` the server's error (the clock reads it),
and the connection is reused only after a terminal chunk on a keep-alive answer. TLS
streams stay on the event loop (the plain canary's TLS requests come here,
probe/canary/engine_tls.py, whose wrapper keeps a streaming wire one). gRPC streams have their wire
in :mod:`~tritonwatch.probe.canary.engine_stream_grpc`; :class:`StreamWire` and
:class:`StreamRequests` are what the engine knows of either.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from tritonwatch.kserve.stream_request import GenerateCodec, OpenAICodec, StreamDecodeError
from tritonwatch.probe.canary.engine_http1 import (
    MAX_ERROR_BODY_BYTES,
    MAX_HEAD_BYTES,
    StreamBody,
    encode_request,
    refused_stream_error,
)
from tritonwatch.probe.stream_timing import StreamClock
from tritonwatch.wire.http1 import HttpProtocolError, ResponseHead, response_head
from tritonwatch.wire.sse import SseParser

STREAM_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}
UNFINISHED_EVENT = "the stream ended inside an event"


@dataclass(frozen=True, slots=True)
class StreamAnswer:
    """One stream as the engine saw it end: its pieces (``clock``, whose origin the
    canary sets: the engine's wire does not know when the request was taken up), when
    its body ended (None: it did not), and the error it ended with, if any. A failed
    stream keeps the pieces it got: their tokens count, as on the event loop."""

    clock: StreamClock
    end: float | None
    error: BaseException | None


class StreamWire(ABC):
    """A connection's streams as the engine reads them (its
    :class:`~tritonwatch.probe.canary.engine_wires.Wire`: the request's bytes, each
    read, what is owed, whether it carries the next), and the answer of a stream the
    engine ended before its wire did."""

    _clock: StreamClock
    """The stream being read."""

    @abstractmethod
    def start(self) -> bytes:
        """The next stream's request bytes; its reading starts afresh."""

    @abstractmethod
    def feed(self, data: bytes, received: float) -> StreamAnswer | None:
        """One read of the answer, stamped ``received``; the stream's answer once it
        ended, well or not (never raises: what the server sent wrong is its outcome)."""

    @abstractmethod
    def take_output(self) -> bytes:
        """Bytes owed to the server meanwhile."""

    @abstractmethod
    def reusable(self) -> bool:
        """Whether the connection may carry the next stream, after this one's answer."""

    @abstractmethod
    def idle_data(self, data: bytes) -> bool:
        """Reads what came while the connection idled; False: it cannot be used again."""

    def failed(self, error: BaseException) -> StreamAnswer:
        """The answer of a stream the engine ended with ``error`` (its timeout, the
        connection failing or closing): the pieces read so far count."""
        return StreamAnswer(self._clock, None, error)


class StreamRequests(ABC):
    """One model's streams as the engine sends them: a fresh request each time (a prompt
    and a token count sampled per stream), read by a new wire per connection."""

    @abstractmethod
    def new_wire(self) -> StreamWire:
        """The reading state of a new connection."""


class HttpStreamRequests(StreamRequests):
    """``generate_stream`` or OpenAI requests, read by :class:`HttpStreamWire`."""

    def __init__(
        self,
        host: str,
        prefix: str,
        codec: GenerateCodec | OpenAICodec,
        sample: Callable[[], tuple[str, int]],
    ) -> None:
        """``host``: the ``Host`` header (``host:port``); ``prefix``: the URL's path
        before the codec's; ``sample``: the canary's prompt sampler."""
        self._host, self._path = host, prefix + codec.path
        self.codec = codec
        self._sample = sample

    def request(self) -> bytes:
        """The next stream's request bytes (sampled on the engine's thread)."""
        prompt, max_tokens = self._sample()
        body = self.codec.encode(prompt, max_tokens)
        return encode_request("POST", self._host, self._path, body, STREAM_HEADERS)

    def new_wire(self) -> HttpStreamWire:
        return HttpStreamWire(self)


class HttpStreamWire(StreamWire):
    """One keep-alive connection's streams, one at a time, read as they arrive (the
    engine's :class:`~tritonwatch.probe.canary.engine_wires.Wire`)."""

    def __init__(self, requests: HttpStreamRequests) -> None:
        self._requests = requests
        self._reusable = False
        self._start_stream()

    def _start_stream(self) -> None:
        self._clock = StreamClock(0.0)
        self._buffer = bytearray()
        self._head: ResponseHead | None = None
        self._body: StreamBody | None = None
        self._parser = SseParser()
        self._error_text = bytearray()
        self._end: float | None = None

    def start(self) -> bytes:
        self._start_stream()
        self._reusable = False
        return self._requests.request()

    def feed(self, data: bytes, received: float) -> StreamAnswer | None:
        try:
            return self._feed(data, received)
        except Exception as error:  # as on the event loop: every failure is an outcome
            # (HttpProtocolError, SseError, StreamDecodeError; anything else a codec
            # raised must not end the engine's thread, every model's canary with it)
            return StreamAnswer(self._clock, None, error)

    def _feed(self, data: bytes, received: float) -> StreamAnswer | None:
        if self._body is None:
            self._buffer += data
            head = response_head(self._buffer)
            if head is None:
                if len(self._buffer) > MAX_HEAD_BYTES:
                    raise HttpProtocolError("a response head without end")
                return None
            self._head, self._body = head, StreamBody(head)
            data = bytes(self._buffer[head.length :])
            self._buffer = bytearray()
        head, body = self._head, self._body
        assert head is not None
        if head.status != 200:
            self._error_text += body.feed(data)
            if body.done or len(self._error_text) >= MAX_ERROR_BODY_BYTES:
                return StreamAnswer(self._clock, None, self._refused(head))
            return None
        self._take(body.feed(data), received)
        if not body.done:
            return None
        self._reusable = body.reusable and head.headers.get("connection", "") != "close"
        return self._ended(received)

    def _take(self, body: bytes, received: float) -> None:
        decode, piece = self._requests.codec.decode, self._clock.piece
        for event in self._parser.feed(body, received):
            piece(event.stamp, decode(event.data))
        self._end = received

    def _ended(self, end: float | None) -> StreamAnswer:
        if self._parser.pending:
            return StreamAnswer(self._clock, None, StreamDecodeError(UNFINISHED_EVENT))
        return StreamAnswer(self._clock, end, None)

    def _refused(self, head: ResponseHead) -> BaseException:
        return refused_stream_error(head.status, bytes(self._error_text))

    def failed(self, error: BaseException) -> StreamAnswer:
        """The answer of a stream the engine ended with ``error`` (its timeout, the
        connection failing or closing). A connection that closed ends a refused stream's
        body (its error from what the body held) and a body without a length (whole)."""
        head, body = self._head, self._body
        if head is None or body is None or not isinstance(error, ConnectionError):
            return super().failed(error)
        if head.status != 200:
            return StreamAnswer(self._clock, None, self._refused(head))
        if not body.reusable:
            return self._ended(self._end)
        return super().failed(error)

    def take_output(self) -> bytes:
        return b""

    def reusable(self) -> bool:
        return self._reusable

    def idle_data(self, data: bytes) -> bool:
        return False  # bytes nobody asked for
