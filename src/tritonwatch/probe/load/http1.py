"""A minimal HTTP/1.1 keep-alive client connection on asyncio's protocol layer.

The sweep sends one pre-encoded request over and over; aiohttp's general machinery
(header objects, cookie jars, streams) costs more CPU than the request itself at
thousands per second. This speaks just enough HTTP/1.1 for Triton's infer endpoint:
one request in flight per connection, Content-Length or chunked responses.
"""

from __future__ import annotations

import asyncio
import ssl


class HttpProtocolError(Exception):
    """The peer sent something this client cannot read as an HTTP/1.1 response."""


_MAX_LENGTH_DIGITS = 15
"""Content-Length and chunk sizes up to about a petabyte; longer ones are refused
rather than handed to int(), which refuses 4300 digits with a bare ValueError."""


def _content_length(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > _MAX_LENGTH_DIGITS:
        raise HttpProtocolError(f"bad Content-Length: {text[:40]!r}")
    return int(text)


def _chunk_size(line: bytes) -> int:
    """The hex size at the start of a chunk line (extensions after ';' are ignored)."""
    digits = line.split(b";", 1)[0].strip()
    if not digits or len(digits) > _MAX_LENGTH_DIGITS or digits.strip(b"0123456789abcdefABCDEF"):
        raise HttpProtocolError(f"bad chunk size line: {line[:40]!r}")
    return int(digits, 16)


class Http1Connection(asyncio.Protocol):
    """One keep-alive connection; :meth:`request` sends bytes and returns (status, body)."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self._closed: BaseException | None = None

    @classmethod
    async def open(cls, host: str, port: int, tls: ssl.SSLContext | None = None) -> Http1Connection:
        """Connects (through TLS when ``tls`` is given, for ``https://`` targets)."""
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(cls, host, port, ssl=tls)
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

    def feed(self, data: bytes) -> tuple[int, bytes] | None:
        """Takes bytes read from the socket by someone else (the canary's engine reads
        its sockets itself) and returns (status, body) once the answer is whole.

        Raises:
            HttpProtocolError: the bytes are not an HTTP/1.1 answer this client reads.
        """
        self._buffer += data
        return self._parse()

    def _parse(self) -> tuple[int, bytes] | None:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            return None
        head = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
        # "HTTP/1.1 200 OK": exactly three digits, so "+200" or "2_00" (which int()
        # takes) are not read as a success.
        version, _, rest = head[0].partition(" ")
        code = rest[:3]
        if not (
            version.startswith("HTTP/")
            and len(code) == 3
            and code.isascii()
            and code.isdigit()
            and rest[3:4] in ("", " ")
        ):
            raise HttpProtocolError(f"bad status line: {head[0][:80]!r}")
        status = int(code)
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        start = end + 4
        # Transfer-Encoding wins over Content-Length when a server sends both (RFC 9112).
        if headers.get("transfer-encoding", "").lower() == "chunked":
            return self._parse_chunked(status, start)
        if "content-length" in headers:
            length = _content_length(headers["content-length"])
            if len(self._buffer) < start + length:
                return None
            body = bytes(self._buffer[start : start + length])
            del self._buffer[: start + length]
            return status, body
        raise HttpProtocolError("response has neither Content-Length nor chunked encoding")

    def _parse_chunked(self, status: int, start: int) -> tuple[int, bytes] | None:
        body = bytearray()
        position = start
        while True:
            line_end = self._buffer.find(b"\r\n", position)
            if line_end < 0:
                return None
            size = _chunk_size(bytes(self._buffer[position:line_end]))
            chunk_start = line_end + 2
            if size == 0:
                # The last chunk; optional trailer fields, then an empty line.
                if self._buffer[chunk_start : chunk_start + 2] == b"\r\n":
                    end = chunk_start + 2
                else:
                    trailers_end = self._buffer.find(b"\r\n\r\n", chunk_start)
                    if trailers_end < 0:
                        return None
                    end = trailers_end + 4
                del self._buffer[:end]
                return status, bytes(body)
            if len(self._buffer) < chunk_start + size + 2:
                return None
            if self._buffer[chunk_start + size : chunk_start + size + 2] != b"\r\n":
                raise HttpProtocolError(f"chunk of {size} bytes is not followed by CRLF")
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
        """Drops the connection at once: a graceful TLS shutdown would need the event
        loop for another round trip, and the loop stops right after a sweep's last close."""
        if self._transport is not None:
            self._transport.abort()
