"""A minimal HTTP/1.1 keep-alive client connection on asyncio's protocol layer.

The sweep sends one pre-encoded request over and over; aiohttp's general machinery
(header objects, cookie jars, streams) costs more CPU than the request itself at
thousands per second. This speaks just enough HTTP/1.1 for Triton's infer endpoint:
one request in flight per connection, Content-Length or chunked responses.

:class:`ChunkedDecoder` reads a chunked body as it arrives, for callers that act on each
piece before the body ends (a ``generate_stream`` answer is one chunked body that lasts as
long as the stream); :class:`Http1Connection` uses it for whole answers.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from enum import Enum, auto
from typing import NoReturn

from tritonwatch.wire.errors import AnswerTooLargeError, HttpProtocolError
from tritonwatch.wire.limits import DEFAULT_LIMITS, AnswerLimits

__all__ = [
    "AnswerTooLargeError",
    "ChunkedDecoder",
    "Http1Connection",
    "HttpProtocolError",
    "ResponseHead",
    "content_length",
    "response_head",
]

_MAX_LENGTH_DIGITS = 15
"""Content-Length and chunk sizes up to about a petabyte; longer ones are refused
rather than handed to int(), which refuses 4300 digits with a bare ValueError."""


def content_length(text: str) -> int:
    """A Content-Length's value. Raises :class:`HttpProtocolError` for one that is not."""
    if not (text.isascii() and text.isdigit()) or len(text) > _MAX_LENGTH_DIGITS:
        raise HttpProtocolError(f"bad Content-Length: {text[:40]!r}")
    return int(text)


def _chunk_size(line: bytes) -> int:
    """The hex size at the start of a chunk line (extensions after ';' are ignored)."""
    digits = line.split(b";", 1)[0].strip()
    if not digits or len(digits) > _MAX_LENGTH_DIGITS or digits.strip(b"0123456789abcdefABCDEF"):
        raise HttpProtocolError(f"bad chunk size line: {line[:40]!r}")
    return int(digits, 16)


ANSWER_START_BYTES = 120
"""How many of an answer's first bytes a reader keeps for its error's ``answer_start``."""
MAX_CHUNK_LINE_BYTES = 4096
"""The longest chunk-size line (extensions included) or trailer field read: only these
lines are buffered, so a peer that never ends one is refused, not buffered for ever."""
MAX_TRAILER_BYTES = 16384
"""All trailer fields of one body together."""


class _Expect(Enum):
    SIZE_LINE = auto()
    DATA = auto()
    DATA_CRLF = auto()
    TRAILER = auto()
    DONE = auto()


class ChunkedDecoder:
    """An HTTP/1.1 chunked body (RFC 9112 section 7.1) decoded as its bytes arrive.

    :meth:`feed` returns the body bytes each read completes, so a stream's events reach
    their reader with the read that brought them, not when the body ends. Chunk data is
    handed on, never held; only an unfinished size line or trailer field is buffered,
    each bounded (:data:`MAX_CHUNK_LINE_BYTES`, :data:`MAX_TRAILER_BYTES`). :attr:`done`
    turns true with the empty line after the last chunk and its trailers: only then may a
    keep-alive connection carry the next request. Bytes fed after that are kept in
    :attr:`leftover` (they belong to whatever the connection carries next).
    """

    def __init__(self) -> None:
        self._expect = _Expect.SIZE_LINE
        self._line = bytearray()
        self._size = 0
        self._remaining = 0
        self._crlf_seen = 0
        self._trailer_bytes = 0
        self.leftover = b""

    @property
    def done(self) -> bool:
        """The last chunk and its trailers have been read: the body is whole."""
        return self._expect is _Expect.DONE

    def feed(self, data: bytes) -> bytes:
        """The body bytes in ``data`` (possibly none: a size line, a CRLF, a partial line).

        Raises:
            HttpProtocolError: a bad chunk-size line, chunk data not followed by CRLF, or
                a size line or trailers over their bound.
        """
        body = bytearray()
        position = 0
        while position < len(data):
            if self._expect is _Expect.DONE:
                self.leftover += data[position:]
                break
            if self._expect is _Expect.DATA:
                take = min(self._remaining, len(data) - position)
                body += data[position : position + take]
                position += take
                self._remaining -= take
                if not self._remaining:
                    self._expect, self._crlf_seen = _Expect.DATA_CRLF, 0
            elif self._expect is _Expect.DATA_CRLF:
                if data[position] != b"\r\n"[self._crlf_seen]:
                    raise HttpProtocolError(f"chunk of {self._size} bytes is not followed by CRLF")
                position += 1
                self._crlf_seen += 1
                if self._crlf_seen == 2:
                    self._expect = _Expect.SIZE_LINE
            else:
                line, position = self._take_line(data, position)
                if line is not None:
                    self._end_of_line(line)
        return bytes(body)

    def _take_line(self, data: bytes, position: int) -> tuple[bytes | None, int]:
        """The line ending in CRLF that ``data[position:]`` completes (None: not yet), and
        where reading goes on. Only a line begun in an earlier read is copied."""
        if self._line.endswith(b"\r") and data.startswith(b"\n", position):
            line, position = bytes(self._line[:-1]), position + 1
        else:
            end = data.find(b"\r\n", position)
            if end < 0:
                self._line += data[position:]
                # One byte more than the bound: a CR the next read's LF may end.
                if len(self._line) > MAX_CHUNK_LINE_BYTES + 1:
                    self._refuse_long_line()
                return None, len(data)
            line, position = bytes(self._line) + data[position:end], end + 2
        self._line.clear()
        if len(line) > MAX_CHUNK_LINE_BYTES:
            self._refuse_long_line()
        return line, position

    def _refuse_long_line(self) -> NoReturn:
        what = "chunk size line" if self._expect is _Expect.SIZE_LINE else "trailer field"
        raise HttpProtocolError(f"{what} longer than {MAX_CHUNK_LINE_BYTES} bytes")

    def _end_of_line(self, line: bytes) -> None:
        if self._expect is _Expect.SIZE_LINE:
            self._size = _chunk_size(line)
            if self._size:
                self._expect, self._remaining = _Expect.DATA, self._size
            else:
                self._expect = _Expect.TRAILER
        elif line:
            self._trailer_bytes += len(line) + 2
            if self._trailer_bytes > MAX_TRAILER_BYTES:
                raise HttpProtocolError(f"trailer fields longer than {MAX_TRAILER_BYTES} bytes")
        else:
            self._expect = _Expect.DONE


@dataclass(frozen=True, slots=True)
class ResponseHead:
    """An HTTP/1.1 response's status line and header fields."""

    status: int
    headers: dict[str, str]
    """Field names lower-cased; a repeated field keeps its last value."""
    length: int
    """Bytes of the head, the empty line that ends it included: where the body starts."""

    @property
    def chunked(self) -> bool:
        """The body is chunked (which wins over Content-Length when both are sent, RFC 9112)."""
        return self.headers.get("transfer-encoding", "").lower() == "chunked"


def response_head(data: bytes | bytearray) -> ResponseHead | None:
    """The head at the start of ``data``, or None while its empty line has not arrived.

    Raises:
        HttpProtocolError: the status line is not ``HTTP/x <three digits>[ reason]``.
    """
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = bytes(data[:end]).decode("latin-1").split("\r\n")
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
    headers = {}
    for line in head[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return ResponseHead(int(code), headers, end + 4)


class Http1Connection(asyncio.Protocol):
    """One keep-alive connection; :meth:`request` sends bytes and returns (status, body).

    Every size the server decides is bounded by ``limits``
    (:class:`~tritonwatch.wire.limits.AnswerLimits`): the head, a
    ``Content-Length`` (refused as soon as the head is read, before any of the body), a
    chunked body as it is decoded, and bytes that arrive while nothing was asked. Past a
    bound the read stops with :class:`AnswerTooLargeError`: the caller closes the
    connection and the rest is never read.
    """

    def __init__(self, limits: AnswerLimits = DEFAULT_LIMITS) -> None:
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self._closed: BaseException | None = None
        self.limits = limits
        self._head: ResponseHead | None = None
        """The head of the answer being read, once whole (its bytes are off the buffer)."""
        self._chunked: ChunkedDecoder | None = None
        self._chunks = bytearray()
        """A chunked body decoded so far (the buffer keeps only what is not decoded)."""
        self._answer_start = b""
        """The first bytes of the answer being read (for an error's ``answer_start``)."""

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
            limits = self.limits
            if len(self._buffer) > limits.max_header_bytes + limits.max_answer_bytes:
                self._refuse(AnswerTooLargeError("bytes nobody asked for, past every bound"))
            return
        try:
            parsed = self._parse()
        except HttpProtocolError as error:
            self._refuse(error)
            return
        if parsed is not None:
            self._waiter.set_result(parsed)

    def _refuse(self, error: HttpProtocolError) -> None:
        """Stops reading: the connection is closed at once (nothing more is buffered)
        and its request, if one waits, fails with ``error``."""
        self._closed = error
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)
        self._buffer.clear()
        if self._transport is not None:
            self._transport.abort()

    def feed(self, data: bytes) -> tuple[int, bytes] | None:
        """Takes bytes read from the socket by someone else (the canary's engine reads
        its sockets itself) and returns (status, body) once the answer is whole.

        Raises:
            HttpProtocolError: the bytes are not an HTTP/1.1 answer this client reads.
            AnswerTooLargeError: the answer is over one of :attr:`limits`.
        """
        if self._head is None and not self._buffer:
            self._answer_start = bytes(data[:ANSWER_START_BYTES])
        self._buffer += data
        try:
            return self._parse()
        except HttpProtocolError as error:
            error.answer_start = self._answer_start
            raise

    def _parse(self) -> tuple[int, bytes] | None:
        head = self._read_head()
        return None if head is None else self._answer(head)

    def _read_head(self) -> ResponseHead | None:
        """The head of the answer being read, taken off the buffer once whole; None
        before. Raises :class:`AnswerTooLargeError` past ``max_header_bytes``."""
        if self._head is not None:
            return self._head
        head = response_head(self._buffer)
        if head is None:
            self.limits.check_header(len(self._buffer), "a response head without end")
            return None
        self.limits.check_header(head.length, "the response head")
        del self._buffer[: head.length]
        self._head = head
        return head

    def _answer(self, head: ResponseHead) -> tuple[int, bytes] | None:
        """(status, body) once the body after ``head`` is whole, taken off the buffer."""
        if head.chunked:
            return self._parse_chunked(head.status)
        if "content-length" in head.headers:
            length = content_length(head.headers["content-length"])
            self.limits.check_answer(length, "a Content-Length")
            if len(self._buffer) < length:
                return None
            body = bytes(self._buffer[:length])
            del self._buffer[:length]
            self._head = None
            return head.status, body
        raise HttpProtocolError("response has neither Content-Length nor chunked encoding")

    def _parse_chunked(self, status: int) -> tuple[int, bytes] | None:
        """(status, body) once the chunked body is whole; None before. Each read is
        decoded once, as it comes, and its body held within ``max_answer_bytes``."""
        if self._chunked is None:
            self._chunked, self._chunks = ChunkedDecoder(), bytearray()
        decoder = self._chunked
        self._chunks += decoder.feed(bytes(self._buffer))
        self._buffer.clear()
        self.limits.check_answer(len(self._chunks), "a chunked body")
        if not decoder.done:
            return None
        self._buffer += decoder.leftover
        body = bytes(self._chunks)
        self._head, self._chunked, self._chunks = None, None, bytearray()
        return status, body

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
