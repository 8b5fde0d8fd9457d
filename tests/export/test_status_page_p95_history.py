"""The p95 history behind the status page's sparkline: bounded, an hour deep, per series."""

from __future__ import annotations

import itertools

import pytest

from tritonwatch.export.p95_history import CAPACITY, HORIZON_SECONDS, P95History, P95Point
from tritonwatch.state.canary_board import SeriesSnapshot

pytestmark = pytest.mark.sim

KEY = ("sim", "simple", "http")


def _snapshot(model: str, p95: float | None) -> SeriesSnapshot:
    window = {} if p95 is None else {0.5: p95 / 2, 0.95: p95, 0.99: p95}
    return SeriesSnapshot("sim", model, "http", {"success": 1}, (1,), p95 or 0.0, 1,
                          {"1m": window, "5m": window})  # fmt: skip


def test_points_are_the_evaluated_p95_with_their_age() -> None:
    """Breaks if a point's value or age is not what was evaluated when, or the order
    is not oldest first."""
    history = P95History()
    for at, p95 in ((100.0, 0.010), (101.0, 0.020), (102.5, 0.015)):
        history.record(KEY, at, p95)
    assert history.points(KEY, 103.0) == (
        P95Point(3.0, 0.010), P95Point(2.0, 0.020), P95Point(0.5, 0.015),
    )  # fmt: skip
    assert history.points(("sim", "other", "http"), 103.0) == ()


@pytest.mark.parametrize("every", [1.0, 15.0, 30.0])
def test_memory_is_bounded_and_the_hour_stays_covered(every: float) -> None:
    """Breaks if the history grows past its capacity, forgets the start of the hour while
    points remain, keeps points older than an hour, or thins unevenly (a gap far wider
    than an hour split over the capacity)."""
    history = P95History()
    now = 0.0
    for step in range(int(3 * HORIZON_SECONDS / every)):
        now = step * every
        history.record(KEY, now, 0.001 * (step % 7))
    points = history.points(KEY, now)
    ages = [p.age_seconds for p in points]
    assert len(points) == CAPACITY
    assert max(ages) <= HORIZON_SECONDS
    assert max(ages) >= HORIZON_SECONDS - 2 * HORIZON_SECONDS / CAPACITY
    gaps = [a - b for a, b in itertools.pairwise(ages)]
    assert max(gaps) <= 2 * HORIZON_SECONDS / CAPACITY
    assert ages[-1] == 0.0  # the newest evaluation is always the last point


def test_a_fast_evaluation_keeps_every_point_until_full() -> None:
    """Breaks if the first minutes after start collapse into a single dot."""
    history = P95History()
    for step in range(30):
        history.record(KEY, float(step), 0.01)
    assert len(history.points(KEY, 29.0)) == 30


def test_observe_takes_the_5m_p95_skips_empty_windows_and_forgets_removed_canaries() -> None:
    """Breaks if the sparkline plots another window than the page's p95, draws a window
    without samples as 0 ms, or keeps a canary's history after a reload removed it."""
    history = P95History()
    history.observe([_snapshot("simple", 0.012), _snapshot("gone", 0.5)], 10.0)
    history.observe([_snapshot("simple", None)], 11.0)
    history.observe([_snapshot("simple", 0.014)], 12.0)
    assert history.points(KEY, 12.0) == (P95Point(2.0, 0.012), P95Point(0.0, 0.014))
    assert history.points(("sim", "gone", "http"), 12.0) == ()


def test_capacity_below_two_is_refused() -> None:
    """Breaks if a history that could not hold a line (one point) is accepted."""
    with pytest.raises(ValueError, match="at least 2"):
        P95History(capacity=1)
