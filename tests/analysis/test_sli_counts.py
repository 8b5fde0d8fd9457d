"""SLI counts (analysis/sli_counts.py): one definition of an SLO's events and good
events, read by the exported counters and the in-process tracker alike."""

from __future__ import annotations

from tritonwatch.analysis.sli_counts import CanaryHistograms, SliCount, sli_counts
from tritonwatch.analysis.slo import SLOKind, SLOSpec
from tritonwatch.records.observations import CanaryResult, Outcome, StreamResult
from tritonwatch.state.canary_board import CanaryBoard, latency_buckets
from tritonwatch.state.stream_board import StreamBoard

DAY = 86400.0


def _spec(kind: SLOKind, threshold: float | None = None, model: str = "m") -> SLOSpec:
    return SLOSpec("t", model, kind, 0.99, 28 * DAY, threshold)


def _canary(*results: tuple[str, Outcome, float | None]) -> CanaryBoard:
    board = CanaryBoard(latency_buckets([0.05, 0.1]))
    board.declare([("t", "m", "http"), ("t", "m", "grpc"), ("t", "other", "http")])
    for at, (protocol, outcome, latency) in enumerate(results):
        board.record(CanaryResult("t", "m", protocol, float(at), outcome, latency))
    return board


def test_latency_and_availability_summed_over_protocols() -> None:
    board = _canary(
        ("http", Outcome.SUCCESS, 0.04),
        ("grpc", Outcome.SUCCESS, 0.05),  # at the threshold: good (le is inclusive)
        ("grpc", Outcome.SUCCESS, 0.07),
        ("http", Outcome.CONNECTION_ERROR, None),  # bad for availability, not timed
        ("http", Outcome.CLIENT_ERROR, 0.01),  # our fault: no availability event
    )
    specs = [_spec(SLOKind.LATENCY, 0.05), _spec(SLOKind.AVAILABILITY)]
    counts = sli_counts(specs, CanaryHistograms(board.snapshot(10.0), board.buckets))
    assert counts == [
        SliCount("t", "m", SLOKind.LATENCY, 4.0, 3.0),
        SliCount("t", "m", SLOKind.AVAILABILITY, 4.0, 3.0),
    ]


def test_a_threshold_between_bounds_or_an_slo_not_judged_has_no_count() -> None:
    board = _canary(("http", Outcome.SUCCESS, 0.04))
    seen = CanaryHistograms(board.snapshot(10.0), board.buckets)
    assert sli_counts([_spec(SLOKind.LATENCY, 0.07)], seen) == []
    assert sli_counts([_spec(SLOKind.AVAILABILITY, model="other")], seen) == [
        SliCount("t", "other", SLOKind.AVAILABILITY, 0.0, 0.0)
    ]
    assert sli_counts([], seen) == []


def test_ttft_counts_streams_and_itl_counts_gaps() -> None:
    streams = StreamBoard(ttft_buckets=(0.2, 0.5), itl_buckets=(0.02, 0.05))
    streams.declare([("t", "m", "openai")])
    for at, ttft, gaps in ((1.0, 0.1, (0.01, 0.03)), (2.0, 0.6, (0.01, 0.01, 0.09))):
        streams.record(
            StreamResult(
                "t", "m", "openai", at, Outcome.SUCCESS, ttft, gaps, len(gaps) + 1, 1.0, None
            )
        )
    board = _canary()
    seen = CanaryHistograms(
        board.snapshot(10.0),
        board.buckets,
        streams.snapshot(10.0),
        streams.ttft_buckets,
        streams.itl_buckets,
    )
    specs = [_spec(SLOKind.TTFT, 0.5), _spec(SLOKind.ITL, 0.02)]
    assert sli_counts(specs, seen) == [
        SliCount("t", "m", SLOKind.TTFT, 2.0, 1.0),
        SliCount("t", "m", SLOKind.ITL, 5.0, 3.0),
    ]
