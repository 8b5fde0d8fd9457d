"""Timing one streamed request from its decoded pieces (docs/design.md §5).

Pure: the transports (generate_stream over HTTP, gRPC ``ModelStreamInfer``, OpenAI
chunks) stamp each piece as it arrives and hand it here, so the three protocols share
one definition of TTFT and ITL, the one genai-perf and vLLM's benchmark use (A6 of
docs/plans/issue18.md):

* a piece without content (an empty ``text_output``, OpenAI's role-only first chunk,
  the usage chunk, ``[DONE]``) is not a token: it moves neither TTFT nor a gap;
* TTFT runs from the request's origin to the first content-bearing piece;
* every gap between consecutive content-bearing pieces is one ITL observation
  (vLLM's ``itl``), and genai-perf's per-request ITL (first to last content piece over
  ``tokens - 1``) is kept beside it so the two can be compared;
* output tokens are the server's count when it gives one, else the content pieces.
"""

from __future__ import annotations

from typing import Protocol

from tritonwatch.records.observations import Outcome, StreamResult

NO_OUTPUT = "the stream ended without output"
"""The error of a stream that ended cleanly but carried no content piece: a canary
asks for at least one token, so an empty answer is a bad response, not a fast one."""


class StreamPiece(Protocol):
    """One decoded response of a stream (``probe.stream_request.Piece`` is the concrete
    one). ``text`` is its output text, where None or ``""`` is no content; ``tokens``
    the token count the server put on it, if any (a per-response count on the vLLM
    backend, the total in OpenAI's usage chunk); ``final`` that it ends the stream;
    ``error`` the server's in-band error message."""

    @property
    def text(self) -> str | None: ...

    @property
    def tokens(self) -> int | None: ...

    @property
    def final(self) -> bool: ...

    @property
    def error(self) -> str | None: ...


def error_outcome(protocol: str) -> Outcome:
    """How an in-band error event is counted: the server answered with an error, in the
    protocol's own words (OpenAI servers speak HTTP)."""
    return Outcome.GRPC_ERROR if protocol == "grpc" else Outcome.HTTP_ERROR


class StreamClock:
    """Collects one request's pieces from ``origin`` (the canary's ``max(intended,
    woke)``, the same origin as a unary request's latency) and turns them into a
    :class:`~tritonwatch.records.observations.StreamResult`. Nothing after a final or an error
    piece counts: the stream is over for the canary."""

    __slots__ = (
        "_content_pieces",
        "_ended_at",
        "_error",
        "_first",
        "_gaps",
        "_last_content",
        "_last_stamp",
        "_server_tokens",
        "origin",
    )

    def __init__(self, origin: float) -> None:
        self.origin = origin
        self._first: float | None = None
        self._last_content: float | None = None
        self._last_stamp: float | None = None
        self._ended_at: float | None = None
        self._gaps: list[float] = []
        self._content_pieces = 0
        self._server_tokens: int | None = None
        self._error: str | None = None

    @property
    def done(self) -> bool:
        """Whether a final or an error piece ended the stream."""
        return self._ended_at is not None

    def piece(self, stamp: float, piece: StreamPiece) -> None:
        """Takes one piece that arrived at monotonic ``stamp``."""
        if self.done:
            return
        self._last_stamp = stamp
        if piece.tokens is not None:
            self._server_tokens = (self._server_tokens or 0) + piece.tokens
        if piece.error is not None:
            # vLLM's backend puts "N/A" in text_output beside its error: not a token.
            self._error = piece.error or "error event without a message"
            self._ended_at = stamp
            return
        if piece.text:
            if self._last_content is None:
                self._first = stamp
            else:
                self._gaps.append(stamp - self._last_content)
            self._last_content = stamp
            self._content_pieces += 1
        if piece.final:
            self._ended_at = stamp

    def result(
        self,
        *,
        target: str,
        model: str,
        protocol: str,
        at: float,
        end: float | None = None,
        failure: Outcome | None = None,
        error: str = "",
        send_lateness_seconds: float | None = None,
    ) -> StreamResult:
        """The stream's record.

        Args:
            at: monotonic time of completion, as :attr:`CanaryResult.at`.
            end: when the stream ended (the end of an HTTP body); by default the final
                or error piece's stamp, else the last piece's; no piece and no ``end``
                leaves ``total_seconds`` None.
            failure: how the transport failed (timeout, connection), which wins over
                what the pieces say; ``error`` is its message.
        """
        outcome, message = self._outcome(protocol, failure, error)
        stop = next((s for s in (end, self._ended_at, self._last_stamp) if s is not None), None)
        reported = self._server_tokens
        tokens = reported if reported is not None else self._content_pieces
        per_request = None
        first, last = self._first, self._last_content
        if first is not None and last is not None and tokens > 1 and self._content_pieces > 1:
            per_request = (last - first) / (tokens - 1)
        return StreamResult(
            target=target,
            model=model,
            protocol=protocol,
            at=at,
            outcome=outcome,
            ttft_seconds=None if self._first is None else self._first - self.origin,
            gaps_seconds=tuple(self._gaps),
            output_tokens=tokens,
            total_seconds=None if stop is None else stop - self.origin,
            itl_per_request_seconds=per_request,
            error=message,
            send_lateness_seconds=send_lateness_seconds,
            tokens_reported=self._server_tokens is not None,
        )

    def _outcome(self, protocol: str, failure: Outcome | None, error: str) -> tuple[Outcome, str]:
        if failure is not None:
            return failure, error
        if self._error is not None:
            return error_outcome(protocol), self._error
        if self._content_pieces == 0:
            return Outcome.BAD_RESPONSE, NO_OUTPUT
        return Outcome.SUCCESS, ""
