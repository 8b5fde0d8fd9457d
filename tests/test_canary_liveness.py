"""The canary series' liveness record: when an outcome last came, and the run of
server failures (what "stalled" and "not serving" are judged from)."""

from __future__ import annotations

from tritonwatch.canary_series import CanaryStats
from tritonwatch.observations import CanaryResult, Outcome

KEY = ("t", "m", "http")


def _record(stats: CanaryStats, outcome: Outcome, at: float) -> None:
    stats.record(CanaryResult("t", "m", "http", at, outcome, 0.01, "boom"))


def _snapshot(stats: CanaryStats, now: float = 100.0):  # type: ignore[no-untyped-def]
    (only,) = stats.snapshot(now)
    return only


def test_a_new_series_has_no_outcome_and_no_failing_run() -> None:
    stats = CanaryStats()
    stats.declare([KEY])
    snap = _snapshot(stats)
    assert (snap.last_outcome_at, snap.failing_since, snap.failures_in_row) == (None, None, 0)


def test_failures_start_a_run_that_a_success_ends() -> None:
    stats = CanaryStats()
    stats.declare([KEY])
    _record(stats, Outcome.HTTP_ERROR, 10.0)
    _record(stats, Outcome.TIMEOUT, 11.0)
    _record(stats, Outcome.BAD_RESPONSE, 12.0)
    snap = _snapshot(stats)
    assert (snap.last_outcome_at, snap.failing_since, snap.failures_in_row) == (12.0, 10.0, 3)
    _record(stats, Outcome.SUCCESS, 13.0)
    snap = _snapshot(stats)
    assert (snap.last_outcome_at, snap.failing_since, snap.failures_in_row) == (13.0, None, 0)


def test_our_own_errors_neither_extend_nor_end_a_failing_run() -> None:
    stats = CanaryStats()
    stats.declare([KEY])
    _record(stats, Outcome.HTTP_ERROR, 10.0)
    _record(stats, Outcome.CLIENT_ERROR, 11.0)
    snap = _snapshot(stats)
    assert (snap.last_outcome_at, snap.failing_since, snap.failures_in_row) == (11.0, 10.0, 1)
    stats2 = CanaryStats()
    stats2.declare([KEY])
    _record(stats2, Outcome.CLIENT_ERROR, 5.0)
    snap = _snapshot(stats2)
    assert (snap.last_outcome_at, snap.failing_since, snap.failures_in_row) == (5.0, None, 0)
