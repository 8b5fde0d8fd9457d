"""TTFT, inter-token gaps, genai-perf's per-request ITL and token counts from stamped pieces."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tritonwatch.probe.stream_timing import NO_OUTPUT, StreamClock
from tritonwatch.records.observations import CanaryResult, Outcome, StreamResult


@dataclass(frozen=True)
class Piece:
    """The duck-typed piece of ``probe.stream_request`` (package A defines the real one)."""

    text: str | None = None
    tokens: int | None = None
    final: bool = False
    error: str | None = None


def timed(origin: float, pieces: list[tuple[float, Piece]], **kwargs: Any) -> StreamResult:
    clock = StreamClock(origin)
    for stamp, piece in pieces:
        clock.piece(stamp, piece)
    return clock.result(target="t", model="m", protocol="http", at=99.0, **kwargs)


def test_ttft_counts_to_the_first_content_piece_and_gaps_join_content_pieces() -> None:
    """Empty pieces (role-only chunk, empty text) move neither TTFT nor a gap."""
    result = timed(
        10.0,
        [
            (10.125, Piece(text="")),  # OpenAI's role-only first chunk
            (10.25, Piece(text="a")),
            (10.375, Piece(text=None)),
            (10.5, Piece(text="b")),
            (11.0, Piece(text="c")),
        ],
        end=11.25,
    )
    assert result.outcome == Outcome.SUCCESS
    assert result.ttft_seconds == 0.25
    assert result.gaps_seconds == (0.25, 0.5)
    assert result.output_tokens == 3
    assert not result.tokens_reported
    assert result.total_seconds == 1.25
    assert result.itl_per_request_seconds == 0.375  # (11.0 - 10.25) / (3 - 1)
    assert result.error == ""


def test_the_servers_token_count_wins_and_sets_the_per_request_itl() -> None:
    """A usage chunk's completion_tokens replaces the piece count (tokens_reported)."""
    result = timed(
        0.0,
        [
            (0.5, Piece(text="hello world")),
            (1.0, Piece(text="again")),
            (1.5, Piece(text=None, tokens=5)),  # the usage chunk: choices == []
            (1.75, Piece(final=True)),  # [DONE]
        ],
    )
    assert result.output_tokens == 5
    assert result.tokens_reported
    assert result.itl_per_request_seconds == 0.125  # (1.0 - 0.5) / (5 - 1)
    assert result.total_seconds == 1.75  # the final piece ends the stream


def test_per_response_counts_add_up() -> None:
    """The vLLM backend's num_output_tokens is per response: the counts are summed."""
    pieces = [(0.5, Piece(text="ab", tokens=2)), (1.0, Piece(text="c", tokens=1, final=True))]
    result = timed(0.0, pieces)
    assert result.output_tokens == 3
    assert result.gaps_seconds == (0.5,)


def test_a_mid_stream_error_is_the_protocols_error_and_ends_the_stream() -> None:
    """An in-band error event fails the stream; what came after it is not counted."""
    pieces = [
        (0.25, Piece(text="a")),
        (0.5, Piece(text="N/A", error="Error generating stream: boom")),
        (0.75, Piece(text="late")),
    ]
    clock = StreamClock(0.0)
    for stamp, piece in pieces:
        clock.piece(stamp, piece)
    assert clock.done
    over_http = clock.result(target="t", model="m", protocol="http", at=1.0)
    over_grpc = clock.result(target="t", model="m", protocol="grpc", at=1.0)
    over_openai = clock.result(target="t", model="m", protocol="openai", at=1.0)
    assert over_http.outcome == Outcome.HTTP_ERROR
    assert over_openai.outcome == Outcome.HTTP_ERROR
    assert over_grpc.outcome == Outcome.GRPC_ERROR
    assert over_http.error == "Error generating stream: boom"
    assert over_http.ttft_seconds == 0.25
    assert over_http.gaps_seconds == ()
    assert over_http.output_tokens == 1
    assert over_http.total_seconds == 0.5


def test_a_stream_without_content_is_a_bad_response() -> None:
    """A clean end with no token is not a fast answer: BAD_RESPONSE, no TTFT."""
    result = timed(0.0, [(0.5, Piece(text="")), (0.75, Piece(final=True))])
    assert result.outcome == Outcome.BAD_RESPONSE
    assert result.error == NO_OUTPUT
    assert result.ttft_seconds is None
    assert result.output_tokens == 0
    assert result.itl_per_request_seconds is None


def test_a_transport_failure_wins_and_keeps_what_was_measured() -> None:
    """A timeout passed by the transport is the outcome, with the end it gives."""
    result = timed(
        1.0, [(1.5, Piece(text="a"))], end=31.0, failure=Outcome.TIMEOUT, error="timed out"
    )
    assert result.outcome == Outcome.TIMEOUT
    assert result.error == "timed out"
    assert result.total_seconds == 30.0
    assert result.ttft_seconds == 0.5


def test_no_piece_and_no_end_says_nothing_about_time() -> None:
    """A refused connection has no total (None), not a zero latency."""
    result = timed(0.0, [], failure=Outcome.CONNECTION_ERROR, error="refused")
    assert result.total_seconds is None
    assert result.ttft_seconds is None


def test_one_token_has_no_per_request_itl() -> None:
    """genai-perf needs two tokens and two responses for its ITL; one gives None."""
    result = timed(0.0, [(0.5, Piece(text="only", final=True))])
    assert result.itl_per_request_seconds is None
    assert result.gaps_seconds == ()
    one_response_many_tokens = timed(0.0, [(0.5, Piece(text="abc", tokens=3, final=True))])
    assert one_response_many_tokens.itl_per_request_seconds is None


def test_the_plain_record_carries_the_whole_stream_as_latency() -> None:
    """Request counters and SLOs see a streamed request with latency = total time."""
    result = timed(0.0, [(0.5, Piece(text="a", final=True))], send_lateness_seconds=0.125)
    plain = result.as_canary_result()
    assert plain == CanaryResult(
        "t", "m", "http", 99.0, Outcome.SUCCESS, 0.5, "", send_lateness_seconds=0.125
    )


@pytest.mark.parametrize("protocol", ["http", "grpc", "openai"])
def test_the_protocol_is_recorded(protocol: str) -> None:
    """The series key of the stream is the protocol it was measured over."""
    clock = StreamClock(0.0)
    clock.piece(0.5, Piece(text="a", final=True))
    assert clock.result(target="t", model="m", protocol=protocol, at=1.0).protocol == protocol
