"""TTFT and ITL SLO events from the streaming canary's histograms, and their burn verdicts."""

from __future__ import annotations

from structlog.testing import capture_logs

from tritonwatch.analysis.slo import BURN_POLICY, SliSource, SLOKind, SLOSpec
from tritonwatch.records.observations import Outcome, StreamResult
from tritonwatch.runtime.slo_event_store import SeriesKey
from tritonwatch.runtime.slo_tracker import SLOTracker
from tritonwatch.state.canary_board import latency_buckets
from tritonwatch.state.stream_board import ITL_DEFAULT_BUCKETS, TTFT_DEFAULT_BUCKETS, StreamBoard

NOW = 1_700_000_000.0
PERIOD = 28 * 86400.0
TTFT = SLOSpec("t", "m", SLOKind.TTFT, 0.95, PERIOD, 0.5)
ITL = SLOSpec("t", "m", SLOKind.ITL, 0.95, PERIOD, 0.05)
TTFT_KEY = SeriesKey("t", "m", SLOKind.TTFT, SliSource.CANARY)
ITL_KEY = SeriesKey("t", "m", SLOKind.ITL, SliSource.CANARY)


def _stats(ttft: float = 0.5, itl: float = 0.05) -> StreamBoard:
    stats = StreamBoard(
        latency_buckets([ttft], TTFT_DEFAULT_BUCKETS), latency_buckets([itl], ITL_DEFAULT_BUCKETS)
    )
    stats.declare([("t", "m", "http")])
    return stats


def _stream(ttft: float | None, *gaps: float, outcome: Outcome = Outcome.SUCCESS) -> StreamResult:
    return StreamResult("t", "m", "http", 1.0, outcome, ttft, gaps, len(gaps) + 1, 1.0, None)


def _observe(tracker: SLOTracker, stats: StreamBoard, at: float = NOW) -> None:
    tracker.observe_stream(stats.snapshot(1.0), stats.ttft_buckets, stats.itl_buckets, at=at)


def _counts(tracker: SLOTracker, key: SeriesKey, span: float = 300) -> tuple[float, float]:
    counts = tracker.store.counts(key, span, NOW)
    return counts.bad, counts.total


def test_first_tokens_and_gaps_become_ttft_and_itl_events() -> None:
    """Breaks if TTFT is not one event per successful stream and ITL one per gap, with the
    threshold itself good (as ``le``), or if a failed stream's timings count."""
    stats = _stats()
    for result in (
        _stream(0.1, 0.01, 0.06),
        _stream(0.5, 0.05),
        _stream(0.7),
        _stream(0.9, 0.2, 0.3, outcome=Outcome.HTTP_ERROR),
    ):
        stats.record(result)
    tracker = SLOTracker([TTFT, ITL])
    _observe(tracker, stats)
    assert _counts(tracker, TTFT_KEY) == (1.0, 3.0)
    assert _counts(tracker, ITL_KEY) == (1.0, 3.0)


def test_only_what_was_timed_since_the_last_snapshot_counts() -> None:
    """Breaks if a snapshot adds its whole cumulative histogram instead of its increase."""
    stats = _stats()
    stats.record(_stream(0.7, 0.2))
    tracker = SLOTracker([TTFT, ITL])
    _observe(tracker, stats, at=NOW - 600)
    stats.record(_stream(0.1, 0.01, 0.02))
    _observe(tracker, stats)
    _observe(tracker, stats)  # nothing new
    assert _counts(tracker, TTFT_KEY) == (0.0, 1.0)
    assert _counts(tracker, ITL_KEY) == (0.0, 2.0)
    assert _counts(tracker, TTFT_KEY, 3600) == (1.0, 2.0)


def test_slow_first_tokens_page_and_fast_ones_do_not() -> None:
    """Breaks if a TTFT burn far above 14.4× the budget does not page, or a clean one does."""
    slow, fast = _stats(), _stats()
    for _ in range(20):
        slow.record(_stream(0.8, 0.01))
        fast.record(_stream(0.2, 0.01))
    burning, calm = SLOTracker([TTFT, ITL]), SLOTracker([TTFT, ITL])
    _observe(burning, slow)
    _observe(calm, fast)
    verdicts = {
        (tracker_name, str(s.spec.kind)): (s.source, s.error_ratios["1h"], s.firing)
        for tracker_name, tracker in (("burning", burning), ("calm", calm))
        for s in tracker.evaluate(NOW)
    }
    assert verdicts == {
        ("burning", "ttft"): (SliSource.CANARY, 1.0, BURN_POLICY[0]),
        ("burning", "itl"): (SliSource.CANARY, 0.0, None),
        ("calm", "ttft"): (SliSource.CANARY, 0.0, None),
        ("calm", "itl"): (SliSource.CANARY, 0.0, None),
    }


def test_a_reload_that_moves_the_threshold_restarts_the_count() -> None:
    """Breaks if new bounds of the same length are read as the old histogram grown on:
    after the reload, all 5 new first tokens are events, not 5 minus the 3 before."""
    before = SLOSpec("t", "m", SLOKind.TTFT, 0.95, PERIOD, 0.4)
    stats = _stats(ttft=0.4)
    for _ in range(3):
        stats.record(_stream(0.1))
    tracker = SLOTracker([before])
    _observe(tracker, stats, at=NOW - 600)
    moved = SLOSpec("t", "m", SLOKind.TTFT, 0.95, PERIOD, 0.3)
    tracker.set_specs([moved])
    old_bounds = stats.ttft_buckets
    stats.set_buckets(ttft=latency_buckets([0.3], TTFT_DEFAULT_BUCKETS), itl=stats.itl_buckets)
    stats.declare([("t", "m", "http")])
    for latency in (0.1, 0.2, 0.35, 0.35, 0.35):
        stats.record(_stream(latency))
    _observe(tracker, stats)
    assert len(stats.ttft_buckets) == len(old_bounds) and stats.ttft_buckets != old_bounds
    assert _counts(tracker, TTFT_KEY) == (3.0, 5.0)


def test_a_ttft_threshold_without_its_bucket_is_reported_once_and_not_guessed() -> None:
    """Breaks if a TTFT threshold missing from the buckets is interpolated or logged each time."""
    stats = StreamBoard((0.1, 1.0), (0.01, 0.05))
    stats.declare([("t", "m", "http")])
    stats.record(_stream(0.2, 0.01))
    tracker = SLOTracker([TTFT, ITL])
    with capture_logs() as logs:
        _observe(tracker, stats)
        _observe(tracker, stats)
    assert [(e["event"], e["slo"]) for e in logs] == [("slo_threshold_not_a_bucket", "ttft")]
    assert _counts(tracker, TTFT_KEY) == (0.0, 0.0)
    assert _counts(tracker, ITL_KEY) == (0.0, 1.0)


def test_streams_of_a_model_without_streaming_slos_add_nothing() -> None:
    """Breaks if TTFT/ITL events are stored for a model whose config sets no ttft/itl SLO."""
    stats = _stats()
    stats.record(_stream(0.8, 0.2))
    latency_only = SLOSpec("t", "m", SLOKind.LATENCY, 0.95, PERIOD, 0.05)
    tracker = SLOTracker([latency_only])
    _observe(tracker, stats)
    assert tracker.evaluate(NOW) == []
