"""HTTP/1.1 for the canary engine: its requests encoded once, its answers' heads and
bodies read.

The engine (:mod:`~tritonwatch.probe.canary.engine`) sends each request as bytes built once
(:func:`encode_request`) and reads the answer with :class:`HeadedConnection`, which keeps
the two headers the decoder needs (``Content-Encoding``,
``Inference-Header-Content-Length``); nothing is inflated here:
:mod:`~tritonwatch.kserve.infer_response` does that once, within its limit. A streamed
body (``generate_stream``, OpenAI) is read as it arrives by :class:`StreamBody`, and a
refused stream's error said by :func:`refused_stream_error` (the stream sweep's pool,
sweep/http_stream_pool.py, reads them alike).
"""

from __future__ import annotations

from collections.abc import Mapping

from tritonwatch.kserve.infer_response import http_status_error
from tritonwatch.kserve.server_errors import ServerError
from tritonwatch.wire.http1 import (
    ChunkedDecoder,
    Http1Connection,
    HttpProtocolError,
    ResponseHead,
    content_length,
)
from tritonwatch.wire.limits import DEFAULT_LIMITS, AnswerLimits, HttpRequest

_KEPT_HEADERS = ("content-encoding", "inference-header-content-length", "connection")


class HeadedConnection(Http1Connection):
    """:class:`Http1Connection` that also keeps the answer's headers the canary reads."""

    def __init__(self, limits: AnswerLimits = DEFAULT_LIMITS) -> None:
        super().__init__(limits)
        self.headers: dict[str, str] = {}
        self.head: ResponseHead | None = None
        """The last whole answer's head."""

    @classmethod
    def for_request(cls, request: HttpRequest) -> HeadedConnection:
        """A parser for the answer to ``request``, within the limits it carries."""
        return cls(request.limits)

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


def refused_stream_error(status: int, text: bytes) -> ServerError:
    """The error of a stream refused with ``status``, from what its body held (up to
    :data:`MAX_ERROR_BODY_BYTES`): an SSE ``data: {"error"}`` event (Triton's error in
    the first response) is unwrapped to its JSON. The event loop's streams and the
    engine's (probe/canary/engine_stream.py) both say it so."""
    payload = text.strip().removeprefix(b"data:").strip()
    return http_status_error(status, payload)
