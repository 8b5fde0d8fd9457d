"""The HTTP canary's infer path: pre-encoded requests on lean HTTP/1.1 keep-alive connections.

aiohttp's per-request machinery (URL and header objects, the streaming reader, the
connector's bookkeeping) was counted in every canary latency, where the same request's
bytes on the sweep's lean connection (:class:`~tritonwatch.wire.http1.Http1Connection`)
pay none of it: a visible share of a fast model's latency, and most of the canary's gap
to perf_analyzer over HTTP (benchmarks/RESULTS.md, §4b: the canary against
perf_analyzer on real Triton).

So each infer is sent as bytes built once (:func:`encode_request`) on a pooled
connection; the answer comes back with the two headers the decoder needs
(``Content-Encoding``, ``Inference-Header-Content-Length``) and nothing is inflated here:
:mod:`~tritonwatch.probe.infer_response` does that once, within its limit. A connection
that did not finish its exchange (timeout, cancellation, error) is dropped, never
reused: a late answer on it would be read as the next request's.

A streamed answer (``generate_stream``, OpenAI ``stream: true``) is one chunked body
that lasts as long as the stream: :meth:`ConnectionPool.stream` hands on its body bytes
read by read, each with the time the read arrived, so every event is timed by its own
arrival, not by the end of the body. Its connection goes back to the pool only after
the terminal chunk.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncGenerator, Mapping

from tritonwatch.probe.infer_response import http_status_error
from tritonwatch.probe.server_errors import ServerError
from tritonwatch.wire.http1 import (
    ChunkedDecoder,
    Http1Connection,
    HttpProtocolError,
    ResponseHead,
    content_length,
    response_head,
)
from tritonwatch.wire.limits import DEFAULT_LIMITS, AnswerLimits, limits_of

_KEPT_HEADERS = ("content-encoding", "inference-header-content-length", "connection")


class HeadedConnection(Http1Connection):
    """:class:`Http1Connection` that also keeps the answer's headers the canary reads."""

    def __init__(self, limits: AnswerLimits = DEFAULT_LIMITS) -> None:
        super().__init__(limits)
        self.headers: dict[str, str] = {}
        self.head: ResponseHead | None = None
        """The last whole answer's head."""

    @classmethod
    def for_request(cls, request: bytes) -> HeadedConnection:
        """A parser for the answer to ``request``, within the limits it carries
        (:class:`~tritonwatch.wire.limits.LimitedRequest`; else the defaults)."""
        return cls(limits_of(request))

    def _parse(self) -> tuple[int, bytes] | None:
        head = self._read_head()  # the head is read once, for both
        if head is None:
            return None
        parsed = self._answer(head)  # consumes the answer from the buffer when complete
        if parsed is not None:
            self.head = head
            self.headers = {
                name: head.headers[name] for name in _KEPT_HEADERS if name in head.headers
            }
        return parsed

    @property
    def closed(self) -> bool:
        return self._closed is not None


MAX_HEAD_BYTES = 65536
"""The longest response head a stream's reader buffers before refusing it."""
MAX_ERROR_BODY_BYTES = 65536
"""How much of a refused stream's body is read for its error message."""


class StreamConnection(asyncio.Protocol):
    """A keep-alive connection whose reads are handed on as they arrive, stamped with
    the event loop's clock (``time.monotonic``) when ``data_received`` ran."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._reads: asyncio.Queue[tuple[bytes, float] | BaseException] = asyncio.Queue()
        self.closed: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._reads.put_nowait((data, time.monotonic()))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = exc or ConnectionResetError("connection closed by the server")
        self._reads.put_nowait(self.closed)

    def write(self, request: bytes) -> None:
        if self.closed is not None:
            raise self.closed
        assert self._transport is not None
        self._transport.write(request)

    async def read(self) -> tuple[bytes, float]:
        """The next read and its stamp. Raises: the error the connection closed with."""
        item = await self._reads.get()
        if isinstance(item, BaseException):
            self._reads.put_nowait(item)  # every later read fails the same way
            raise item
        return item

    def close(self) -> None:
        if self._transport is not None:
            self._transport.abort()


class StreamBody:
    """A response body read as it arrives: chunked, ``Content-Length``, or (neither)
    until the server closes the connection; its bytes all told within
    ``limits.max_answer_bytes`` (a stream that never ends is cut off, not read on)."""

    def __init__(self, head: ResponseHead, limits: AnswerLimits = DEFAULT_LIMITS) -> None:
        self._chunked = ChunkedDecoder() if head.chunked else None
        length = head.headers.get("content-length")
        self._remaining: int | None = None
        self._limits = limits
        self._read = 0
        if self._chunked is None and length is not None:
            self._remaining = content_length(length)
            limits.check_answer(self._remaining, "a streamed body's Content-Length")
        self.reusable = self._chunked is not None or self._remaining is not None

    @property
    def done(self) -> bool:
        if self._chunked is not None:
            return self._chunked.done
        return self._remaining == 0

    def feed(self, data: bytes) -> bytes:
        """The body bytes in ``data``.

        Raises:
            HttpProtocolError: bytes past the body's end, or a bad chunk.
            AnswerTooLargeError: the body so far is over ``max_answer_bytes``.
        """
        self._read += len(data)
        self._limits.check_answer(self._read, "a streamed body")
        if self._chunked is not None:
            body = self._chunked.feed(data)
            if self._chunked.leftover:
                raise HttpProtocolError("bytes after the end of a streamed body")
            return body
        if self._remaining is None:
            return data
        if len(data) > self._remaining:
            raise HttpProtocolError("bytes after the end of a streamed body")
        self._remaining -= len(data)
        return data


def encode_request(
    method: str, host: str, path: str, body: bytes, headers: Mapping[str, str]
) -> bytes:
    """A complete keep-alive HTTP/1.1 request for ``path`` on ``host`` (as
    ``host:port``), with ``headers`` added; a POST says its body's length."""
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: {host}",
        "Connection: keep-alive",
        *([f"Content-Length: {len(body)}"] if method == "POST" else []),
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class ConnectionPool:
    """Idle keep-alive connections to one server; one exchange at a time on each."""

    def __init__(self, host: str, port: int, tls: ssl.SSLContext | None, limit: int) -> None:
        self._host, self._port, self._tls = host, port, tls
        self._idle: list[HeadedConnection] = []
        self._idle_streams: list[StreamConnection] = []
        self._slots = asyncio.Semaphore(limit)
        """At most ``limit`` exchanges (so connections) at once; the rest wait."""

    async def exchange(self, request: bytes) -> tuple[int, dict[str, str], bytes]:
        """Sends ``request`` and returns the status, kept headers and body (as sent)."""
        async with self._slots:
            connection = await self._connection()
            done = False
            try:
                status, body = await connection.request(request)
                done = True
            finally:
                keep = done and not connection.closed
                if keep and connection.headers.get("connection", "").lower() != "close":
                    self._idle.append(connection)
                else:
                    connection.close()
            return status, connection.headers, body

    async def stream(self, request: bytes) -> AsyncGenerator[tuple[bytes, float], None]:
        """Sends ``request`` and yields the answer's body bytes read by read, each with
        the monotonic time its read arrived, until the body ends. The connection is
        kept only when the body ended (its terminal chunk read); one left early
        (timeout, cancellation, error, the caller stopping) is closed. Use it under
        ``contextlib.aclosing``.

        Raises:
            ServerError: a status other than 200 (its body's error as the message).
            HttpProtocolError: an answer that is no HTTP/1.1 response this reads.
            OSError: the connection failed or closed before the body ended.
        """
        async with self._slots:
            connection = await self._stream_connection()
            finished = False
            try:
                connection.write(request)
                buffer = bytearray()
                while (head := response_head(buffer)) is None:
                    if len(buffer) > MAX_HEAD_BYTES:
                        raise HttpProtocolError("a response head without end")
                    data, stamp = await connection.read()
                    buffer += data
                body = StreamBody(head)
                first = bytes(buffer[head.length :])
                if head.status != 200:
                    text = await _error_body(connection, body, first)
                    raise refused_stream_error(head.status, text)
                if first:
                    yield body.feed(first), stamp
                while not body.done:
                    try:
                        data, stamp = await connection.read()
                    except ConnectionError:
                        if body.reusable:
                            raise
                        return  # a body without length ends with its connection
                    yield body.feed(data), stamp
                finished = body.reusable and head.headers.get("connection", "") != "close"
            finally:
                if finished and connection.closed is None:
                    self._idle_streams.append(connection)
                else:
                    connection.close()

    async def _stream_connection(self) -> StreamConnection:
        while self._idle_streams:
            connection = self._idle_streams.pop()
            if connection.closed is None:
                return connection
        _, protocol = await asyncio.get_running_loop().create_connection(
            StreamConnection, self._host, self._port, ssl=self._tls
        )
        return protocol

    async def _connection(self) -> HeadedConnection:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:  # the server may have closed it while it idled
                return connection
        _, protocol = await asyncio.get_running_loop().create_connection(
            HeadedConnection, self._host, self._port, ssl=self._tls
        )
        return protocol

    def close_idle(self) -> None:
        """Closes the connections no exchange is using (the pool stays usable)."""
        idle, self._idle = self._idle, []
        streams, self._idle_streams = self._idle_streams, []
        for connection in idle:
            connection.close()
        for stream in streams:
            stream.close()

    def close(self) -> None:
        self.close_idle()


async def _error_body(connection: StreamConnection, body: StreamBody, first: bytes) -> bytes:
    """The body of a refused stream, for its error message: read until it ends, the
    connection closes, or :data:`MAX_ERROR_BODY_BYTES`."""
    text = bytearray(body.feed(first))
    while not body.done and len(text) < MAX_ERROR_BODY_BYTES:
        try:
            data, _ = await connection.read()
        except ConnectionError:
            break
        text += body.feed(data)
    return bytes(text)


def refused_stream_error(status: int, text: bytes) -> ServerError:
    """The error of a stream refused with ``status``, from what its body held (up to
    :data:`MAX_ERROR_BODY_BYTES`): an SSE ``data: {"error"}`` event (Triton's error in
    the first response) is unwrapped to its JSON. The event loop's streams and the
    engine's (probe/canary/engine_stream.py) both say it so."""
    payload = text.strip().removeprefix(b"data:").strip()
    return http_status_error(status, payload)
