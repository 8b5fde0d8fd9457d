"""The stream sweep's HTTP/1.1 connections: streamed answers read on the event loop.

A streamed answer (``generate_stream``, OpenAI ``stream: true``) is one body that lasts
as long as the stream: :meth:`ConnectionPool.stream` hands on its body bytes read by
read, each with the time the read arrived, so every event is timed by its own arrival,
not by the end of the body. Its connection goes back to the pool only after the body
ended; one that did not finish (timeout, cancellation, error) is dropped, never reused.
The body and a refused stream's error are read as the canary engine reads them
(:mod:`~tritonwatch.probe.canary.engine_http1`).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncGenerator

from tritonwatch.probe.canary.engine_http1 import (
    MAX_ERROR_BODY_BYTES,
    MAX_HEAD_BYTES,
    StreamBody,
    refused_stream_error,
)
from tritonwatch.wire.http1 import HttpProtocolError, response_head


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


class ConnectionPool:
    """Idle keep-alive connections to one server for streamed answers; one stream at
    a time on each."""

    def __init__(self, host: str, port: int, tls: ssl.SSLContext | None, limit: int) -> None:
        self._host, self._port, self._tls = host, port, tls
        self._idle_streams: list[StreamConnection] = []
        self._slots = asyncio.Semaphore(limit)
        """At most ``limit`` exchanges (so connections) at once; the rest wait."""

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

    def close_idle(self) -> None:
        """Closes the connections no exchange is using (the pool stays usable)."""
        streams, self._idle_streams = self._idle_streams, []
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
