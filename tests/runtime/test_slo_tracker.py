"""SLO events from the canary and the server, evaluation, and surviving a restart."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import pytest
from structlog.testing import capture_logs

from tritonwatch.analysis.slo import BURN_POLICY, SliSource, SLOKind, SLOSpec
from tritonwatch.records.observations import (
    CanaryResult,
    ModelKey,
    ModelRates,
    Outcome,
    TritonRates,
)
from tritonwatch.runtime.slo_event_store import SeriesKey
from tritonwatch.runtime.slo_tracker import SLOTracker
from tritonwatch.state.canary_board import CanaryBoard, latency_buckets

NOW = 1_700_000_000.0
LATENCY = SLOSpec("t", "m", SLOKind.LATENCY, 0.95, 28 * 86400.0, 0.05)
AVAILABILITY = SLOSpec("t", "m", SLOKind.AVAILABILITY, 0.999, 28 * 86400.0)
CANARY_AVAILABILITY = SeriesKey("t", "m", SLOKind.AVAILABILITY, SliSource.CANARY)
CANARY_LATENCY = SeriesKey("t", "m", SLOKind.LATENCY, SliSource.CANARY)
SERVER_AVAILABILITY = SeriesKey("t", "m", SLOKind.AVAILABILITY, SliSource.SERVER)


def _stats(*results: tuple[Outcome, float | None]) -> CanaryBoard:
    stats = CanaryBoard(latency_buckets([0.05]))
    stats.declare([("t", "m", "http")])
    _record(stats, *results)
    return stats


def _record(stats: CanaryBoard, *results: tuple[Outcome, float | None]) -> None:
    for outcome, latency in results:
        stats.record(CanaryResult("t", "m", "http", 1.0, outcome, latency))


def _counts(tracker: SLOTracker, key: SeriesKey) -> tuple[float, float]:
    counts = tracker.store.counts(key, 300, NOW)
    return counts.bad, counts.total


def test_canary_counts_become_latency_and_availability_events() -> None:
    """Availability: 2 of 4 failed. Latency: of 3 timed requests, one ≤ 50 ms (the bound
    itself counts as fast, as ``le`` does); a refused connection has no latency."""
    stats = _stats(
        (Outcome.SUCCESS, 0.01),
        (Outcome.SUCCESS, 0.05),
        (Outcome.SUCCESS, 0.2),
        (Outcome.TIMEOUT, 2.0),
        (Outcome.CONNECTION_ERROR, None),
    )
    tracker = SLOTracker([LATENCY, AVAILABILITY])
    tracker.observe_canary(stats.snapshot(1.0), stats.buckets, at=NOW)
    assert _counts(tracker, CANARY_AVAILABILITY) == (2.0, 5.0)
    assert _counts(tracker, CANARY_LATENCY) == (2.0, 4.0)


def test_only_the_increase_since_the_last_snapshot_counts() -> None:
    """A canary snapshot counts only its increase since the last one, not its whole total."""
    stats = _stats((Outcome.SUCCESS, 0.01))
    tracker = SLOTracker([LATENCY, AVAILABILITY])
    tracker.observe_canary(stats.snapshot(1.0), stats.buckets, at=NOW - 600)
    _record(stats, (Outcome.TIMEOUT, 2.0), (Outcome.SUCCESS, 0.01))
    tracker.observe_canary(stats.snapshot(2.0), stats.buckets, at=NOW)
    tracker.observe_canary(stats.snapshot(3.0), stats.buckets, at=NOW)  # nothing new
    assert _counts(tracker, CANARY_AVAILABILITY) == (1.0, 2.0)
    assert tracker.store.counts(CANARY_AVAILABILITY, 3600, NOW).total == 3.0


def test_counters_that_restart_are_counted_from_zero() -> None:
    """A reload that changes the buckets restarts the canary's histogram."""
    stats = _stats((Outcome.SUCCESS, 0.01), (Outcome.SUCCESS, 0.01), (Outcome.SUCCESS, 0.01))
    tracker = SLOTracker([LATENCY, AVAILABILITY])
    tracker.observe_canary(stats.snapshot(1.0), stats.buckets, at=NOW - 60)
    stats.set_buckets(latency_buckets([0.05, 0.3]))
    stats.declare([("t", "m", "http")])
    _record(stats, (Outcome.SUCCESS, 0.1))
    tracker.observe_canary(stats.snapshot(2.0), stats.buckets, at=NOW)
    assert _counts(tracker, CANARY_LATENCY) == (1.0, 4.0)
    assert _counts(tracker, CANARY_AVAILABILITY) == (0.0, 4.0)


def test_a_threshold_without_its_bucket_is_reported_once() -> None:
    """A latency threshold with no bucket of its own is not guessed at, and is warned of once."""
    stats = CanaryBoard((0.1, 1.0))
    stats.declare([("t", "m", "http")])
    _record(stats, (Outcome.SUCCESS, 0.01))
    tracker = SLOTracker([LATENCY, AVAILABILITY])
    with capture_logs() as logs:
        tracker.observe_canary(stats.snapshot(1.0), stats.buckets, at=NOW)
        tracker.observe_canary(stats.snapshot(1.0), stats.buckets, at=NOW)
    assert [e["event"] for e in logs] == ["slo_threshold_not_a_bucket"]
    assert _counts(tracker, CANARY_LATENCY) == (0.0, 0.0)
    assert _counts(tracker, CANARY_AVAILABILITY) == (0.0, 1.0)


def _rates(model: str, version: str, ok: float | None, failed: float | None) -> ModelRates:
    return ModelRates(
        model=model,
        version=version,
        interval_seconds=10.0,
        counters_reset=False,
        requests_per_second=ok,
        inferences_per_second=ok,
        executions_per_second=ok,
        failures_per_second=failed,
        failures_per_second_by_reason=MappingProxyType({}),
        batch_size_average=1.0,
        request_seconds_average=0.01,
        queue_seconds_average=0.001,
        compute_input_seconds_average=0.001,
        compute_infer_seconds_average=0.005,
        compute_output_seconds_average=0.001,
        pending_requests=0.0,
    )


def test_server_availability_sums_versions_of_the_model() -> None:
    """Versions 1 and 2 of m: (100 + 50) ok/s and (1 + 0.5) failed/s over 10 s."""
    rates = TritonRates(
        10.0,
        MappingProxyType(
            {
                ModelKey("m", "1"): _rates("m", "1", 100.0, 1.0),
                ModelKey("m", "2"): _rates("m", "2", 50.0, 0.5),
                ModelKey("other", "1"): _rates("other", "1", 999.0, 999.0),
            }
        ),
        MappingProxyType({}),
    )
    tracker = SLOTracker([LATENCY, AVAILABILITY])
    tracker.observe_server("t", rates, at=NOW)
    tracker.observe_server("elsewhere", rates, at=NOW)
    assert _counts(tracker, SERVER_AVAILABILITY) == (15.0, 1515.0)


def test_a_server_without_failure_counters_gives_no_server_sli() -> None:
    """A server without failure counters gives no server SLI, not 100 % availability."""
    rates = TritonRates(
        10.0,
        MappingProxyType({ModelKey("m", "1"): _rates("m", "1", 100.0, None)}),
        MappingProxyType({}),
    )
    tracker = SLOTracker([AVAILABILITY])
    tracker.observe_server("t", rates, at=NOW)
    assert _counts(tracker, SERVER_AVAILABILITY) == (0.0, 0.0)
    assert tracker.evaluate(NOW) == []


def _burning_tracker(state_file: Path | None, clock: list[float]) -> SLOTracker:
    """Every canary request fails for fifteen minutes, snapshot every 15 s: 900 events,
    past the 695 the 1 h page needs (10 / (14.4 × 0.001))."""
    stats = _stats()
    tracker = SLOTracker([AVAILABILITY], state_file=state_file, clock=lambda: clock[0])
    for step in range(60):
        clock[0] = NOW - 900 + step * 15
        _record(stats, *[(Outcome.CONNECTION_ERROR, None)] * 15)
        tracker.observe_canary(stats.snapshot(float(step)), stats.buckets)
    return tracker


def test_an_ongoing_burn_pages_from_both_sources() -> None:
    """An ongoing burn pages from both canary and server with the same burn rate."""
    clock = [NOW]
    tracker = _burning_tracker(None, clock)
    rates = TritonRates(
        10.0,
        MappingProxyType({ModelKey("m", "1"): _rates("m", "1", 0.0, 100.0)}),
        MappingProxyType({}),
    )
    tracker.observe_server("t", rates, at=NOW)  # 1000 failed requests
    statuses = {s.source: s for s in tracker.evaluate(NOW)}
    assert set(statuses) == {SliSource.CANARY, SliSource.SERVER}
    for status in statuses.values():
        assert status.firing is BURN_POLICY[0]
        assert status.burn_rates["1h"] == pytest.approx(1000.0)
        assert status.error_budget_remaining == pytest.approx(-999.0)


def test_a_restart_does_not_hide_an_ongoing_burn(tmp_path: Path) -> None:
    """The daemon saves, stops for two minutes and starts again: the reloaded events
    still page; a daemon that forgot them would see nothing."""
    state = tmp_path / "slo-events.json"
    clock = [NOW]
    _burning_tracker(state, clock).save()
    clock[0] = NOW + 120

    forgetful = SLOTracker([AVAILABILITY], state_file=tmp_path / "absent.json")
    forgetful.load()
    assert forgetful.evaluate(clock[0]) == []

    restarted = SLOTracker([AVAILABILITY], state_file=state, clock=lambda: clock[0])
    with capture_logs() as logs:
        restarted.load()
    assert logs[0]["event"] == "slo_state_loaded"
    (status,) = restarted.evaluate()
    assert status.firing is BURN_POLICY[0]


def test_an_unreadable_state_file_starts_empty_with_a_warning(tmp_path: Path) -> None:
    """A corrupt SLO state file starts the tracker empty with a warning, not a crash."""
    state = tmp_path / "slo-events.json"
    state.write_text("{broken")
    tracker = SLOTracker([AVAILABILITY], state_file=state)
    with capture_logs() as logs:
        tracker.load()
    assert logs[0]["event"] == "slo_state_unreadable"
    assert logs[0]["log_level"] == "warning"


def test_a_failed_save_is_logged_not_raised(tmp_path: Path) -> None:
    """A state file that cannot be written is logged, and the daemon goes on."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    tracker = SLOTracker([AVAILABILITY], state_file=blocker / "sub" / "state.json")
    with capture_logs() as logs:
        tracker.save()
    assert logs[0]["event"] == "slo_state_save_failed"


def test_client_errors_are_not_availability_events() -> None:
    """Breaks if a ``client_error`` (our parser's fault) counts as an event of the
    availability SLO, good or bad; latency still times it like any request."""
    stats = _stats(
        (Outcome.SUCCESS, 0.01),
        (Outcome.CLIENT_ERROR, 0.02),
        (Outcome.CLIENT_ERROR, None),
        (Outcome.TIMEOUT, 2.0),
    )
    tracker = SLOTracker([LATENCY, AVAILABILITY])
    tracker.observe_canary(stats.snapshot(1.0), stats.buckets, at=NOW - 60)
    _record(stats, (Outcome.CLIENT_ERROR, None), (Outcome.SUCCESS, 0.01))
    tracker.observe_canary(stats.snapshot(2.0), stats.buckets, at=NOW)
    assert _counts(tracker, CANARY_AVAILABILITY) == (1.0, 3.0)
    assert _counts(tracker, CANARY_LATENCY) == (1.0, 4.0)


def test_a_restart_soon_after_start_pages_nothing() -> None:
    """Breaks if 5 or 10 failures on a five-minute-old window page at any evaluation
    (the issue's false page: 5 of ~330 events read 1.5 % against the 1.44 % limit),
    while the ratios alone, ungated, would have paged."""
    page = BURN_POLICY[0]
    for failures in (5, 10):
        stats = _stats()
        tracker = SLOTracker([AVAILABILITY])
        start, firing, ungated = NOW - 3600, set(), False
        for second in range(300 + failures + 1800):
            bad = 300 <= second < 300 + failures
            _record(stats, (Outcome.CONNECTION_ERROR, None) if bad else (Outcome.SUCCESS, 0.01))
            if second % 15 == 14:
                at = start + second
                tracker.observe_canary(stats.snapshot(float(second)), stats.buckets, at=at)
                (status,) = tracker.evaluate(at)
                firing.add(status.firing)
                ungated |= page.holds(status.error_ratios, AVAILABILITY.error_budget)
        assert ungated, failures
        assert firing == {None}, failures


def test_a_model_that_keeps_failing_on_a_young_window_pages() -> None:
    """Breaks if the min-events gate swallows a real outage: after five good minutes
    every request fails, and the 1 h page fires once the hour holds 695 events."""
    stats = _stats()
    tracker = SLOTracker([AVAILABILITY])
    start, first_page = NOW - 3600, None
    for second in range(1200):
        outcome = (Outcome.CONNECTION_ERROR, None) if second >= 300 else (Outcome.SUCCESS, 0.01)
        _record(stats, outcome)
        if second % 15 == 14:
            tracker.observe_canary(stats.snapshot(float(second)), stats.buckets, at=start + second)
            (status,) = tracker.evaluate(start + second)
            if status.firing is not None and first_page is None:
                first_page = second
                assert status.firing is BURN_POLICY[0]
                assert status.window_events["1h"] >= 10 / (14.4 * (1 - 0.999))
    # The first evaluation whose hour holds 695 events: second 694 is the 695th request.
    assert first_page == 704
