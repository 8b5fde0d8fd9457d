"""A minimal HTTP/1.1 keep-alive client connection on asyncio's protocol layer.

The sweep sends one pre-encoded request over and over; aiohttp's general machinery
(header objects, cookie jars, streams) costs more CPU than the request itself at
thousands per second. This speaks just enough HTTP/1.1 for Triton's infer endpoint:
one request in flight per connection, Content-Length or chunked responses.
"""

from __future__ import annotations

import asyncio


class HttpProtocolError(Exception):
    """The peer sent something this client cannot read as an HTTP/1.1 response."""


class Http1Connection(asyncio.Protocol):
    """One keep-alive connection; :meth:`request` sends bytes and returns (status, body)."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self._closed: BaseException | None = None

    @classmethod
    async def open(cls, host: str, port: int) -> Http1Connection:
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(cls, host, port)
        return protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = exc or ConnectionResetError("connection closed by the server")
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(self._closed)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if self._waiter is None or self._waiter.done():
            return
        try:
            parsed = self._parse()
        except HttpProtocolError as error:
            self._waiter.set_exception(error)
            return
        if parsed is not None:
            self._waiter.set_result(parsed)

    def _parse(self) -> tuple[int, bytes] | None:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            return None
        head = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
        try:
            status = int(head[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            raise HttpProtocolError(f"bad status line: {head[0][:80]!r}") from None
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        start = end + 4
        if "content-length" in headers:
            length = int(headers["content-length"])
            if len(self._buffer) < start + length:
                return None
            body = bytes(self._buffer[start : start + length])
            del self._buffer[: start + length]
            return status, body
        if headers.get("transfer-encoding", "").lower() == "chunked":
            return self._parse_chunked(status, start)
        raise HttpProtocolError("response has neither Content-Length nor chunked encoding")

    def _parse_chunked(self, status: int, start: int) -> tuple[int, bytes] | None:
        body = bytearray()
        position = start
        while True:
            line_end = self._buffer.find(b"\r\n", position)
            if line_end < 0:
                return None
            size = int(bytes(self._buffer[position:line_end]).split(b";")[0], 16)
            chunk_start = line_end + 2
            if len(self._buffer) < chunk_start + size + 2:
                return None
            if size == 0:
                del self._buffer[: chunk_start + 2]
                return status, bytes(body)
            body += self._buffer[chunk_start : chunk_start + size]
            position = chunk_start + size + 2

    async def request(self, payload: bytes) -> tuple[int, bytes]:
        """Sends ``payload`` (a whole HTTP request) and waits for the whole response."""
        if self._closed is not None:
            raise self._closed
        assert self._transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self._transport.write(payload)
        return await self._waiter

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
