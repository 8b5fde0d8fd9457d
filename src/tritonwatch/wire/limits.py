"""How much of an answer the canary reads before it stops: the bounds every reader of
a server's bytes holds to (``canary.limits``).

A server, or a proxy in front of it, decides how large its answers are: a
``Content-Length`` of a gibibyte, a chunked body without end, HTTP/2 DATA frames
flooding a stream, a gzip bomb. The daemon's memory goal is 60 MiB of RSS for every
target together, so one misbehaving server must cost one outcome (``too_large``), not
the process and every other server's canaries with it. Each reader checks the size a
server *claims* before reading (a length, a length prefix) and the size it *sends*
while reading, and raises :class:`AnswerTooLargeError` the moment either passes its
bound; the connection is then closed, the rest never read.

The defaults fit the memory goal with room for a few answers in flight at once:
16 MiB per answer (a KServe v2 answer of a canary's smallest request is a few hundred
bytes; Triton's own default gRPC message limit is far above what a canary asks for),
64 KiB of headers (HTTP/1.1 head, HTTP/2 header block with its CONTINUATION frames),
and a 1 MiB HTTP/2 flow-control window, which is what the server may send before the
client has read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonwatch.wire.errors import AnswerTooLargeError

__all__ = ["DEFAULT_LIMITS", "AnswerLimits", "AnswerTooLargeError", "HttpRequest"]

MiB = 1 << 20
DEFAULT_MAX_ANSWER_BYTES = 16 * MiB
DEFAULT_MAX_HEADER_BYTES = 64 * 1024
DEFAULT_HTTP2_WINDOW = 1 * MiB
"""As ``canary.limits``' defaults in config/canary_schema.py (the wire code imports no config;
tests/probe/test_answer_limits.py holds the two equal)."""


@dataclass(frozen=True, slots=True)
class AnswerLimits:
    """The bounds one canary's readers hold to (``canary.limits`` in the config)."""

    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    """An answer's body as sent and once inflated, a gRPC message, one stream's bytes."""
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    """An HTTP/1.1 response head; an HTTP/2 header block with its CONTINUATION frames."""
    http2_window: int = DEFAULT_HTTP2_WINDOW
    """The flow-control window the HTTP/2 client advertises (stream and connection)."""

    def check_answer(self, size: int, what: str) -> None:
        """Raises :class:`AnswerTooLargeError` when ``size`` bytes of ``what`` (an
        answer's body, a message) are over :attr:`max_answer_bytes`."""
        if size > self.max_answer_bytes:
            raise AnswerTooLargeError(
                f"{what} of {size} bytes is over canary.limits.max_answer_bytes "
                f"({self.max_answer_bytes})"
            )

    def check_header(self, size: int, what: str) -> None:
        """As :meth:`check_answer`, for headers and :attr:`max_header_bytes`."""
        if size > self.max_header_bytes:
            raise AnswerTooLargeError(
                f"{what} of {size} bytes is over canary.limits.max_header_bytes "
                f"({self.max_header_bytes})"
            )


DEFAULT_LIMITS = AnswerLimits()


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """A whole HTTP/1.1 request's bytes and the limits its answer is read with: what the
    canary hands the engine, so the limits travel with the bytes they belong to."""

    data: bytes
    limits: AnswerLimits = DEFAULT_LIMITS
