"""The knee and operating point on curves whose answers are known by construction."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tritonwatch.analysis.knee import find_knee, operating_point
from tritonwatch.records.sweep_records import CurvePoint

CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64)


def _curve(throughput: dict[int, float], p95: dict[int, float] | None = None) -> list[CurvePoint]:
    return [CurvePoint(c, throughput[c], (p95 or {}).get(c, 0.01 * c)) for c in sorted(throughput)]


def test_saturating_curve_knee_is_where_it_flattens() -> None:
    """x = 100·min(c, 8): each request in flight adds 100/s until 8, then nothing."""
    knee = find_knee(_curve({c: 100.0 * min(c, 8) for c in CONCURRENCIES}))
    assert (knee.concurrency, knee.throughput, knee.reached) == (8, 800.0, True)


def test_flat_curve_knee_is_the_first_point() -> None:
    """A flat curve's knee is concurrency 1, and it counts as reached."""
    knee = find_knee(_curve(dict.fromkeys(CONCURRENCIES, 500.0)))
    assert (knee.concurrency, knee.reached) == (1, True)


def test_linear_curve_has_no_knee_yet() -> None:
    """A curve still rising at 64 reports its last point as a knee not yet reached."""
    knee = find_knee(_curve({c: 50.0 * c for c in CONCURRENCIES}))
    assert (knee.concurrency, knee.reached) == (64, False)


def test_noisy_plateau_does_not_move_the_knee() -> None:
    """±2 % noise after saturation at 16 stays below 10 % of the per-request gain."""
    noise = {32: 1.02, 64: 0.98, 16: 1.0, 8: 1.0, 4: 1.0, 2: 1.0, 1: 1.0}
    curve = _curve({c: 100.0 * min(c, 16) * noise[c] for c in CONCURRENCIES})
    assert find_knee(curve).concurrency == 16


def test_non_monotonic_curve_with_a_second_rise_moves_the_knee_out() -> None:
    """A dip then a real rise (e.g. batching kicks in): the last meaningful gain wins."""
    throughput = {1: 100.0, 2: 200.0, 4: 210.0, 8: 190.0, 16: 1000.0, 32: 1010.0, 64: 1005.0}
    knee = find_knee(_curve(throughput))
    assert (knee.concurrency, knee.reached) == (16, True)


def test_points_in_any_order() -> None:
    """The knee does not depend on the order the sweep points arrive in."""
    curve = _curve({c: 100.0 * min(c, 4) for c in CONCURRENCIES})
    assert find_knee(list(reversed(curve))).concurrency == 4


def test_operating_point_is_best_throughput_inside_budget() -> None:
    """The operating point is the best throughput within the p95 budget, 8 over a tied 16."""
    throughput = {c: 100.0 * min(c, 8) for c in CONCURRENCIES}
    p95 = {1: 0.010, 2: 0.011, 4: 0.012, 8: 0.020, 16: 0.040, 32: 0.080, 64: 0.160}
    point = operating_point(_curve(throughput, p95), budget_p95_seconds=0.050)
    assert point is not None
    assert (point.concurrency, point.throughput) == (8, 800.0)  # 16 ties at 800 but queues more


def test_operating_point_is_none_when_nothing_fits() -> None:
    """No operating point is offered when every point breaks the latency budget."""
    assert operating_point(_curve({1: 10.0, 2: 20.0}, {1: 0.2, 2: 0.3}), 0.05) is None


def test_empty_and_invalid_curves_are_refused() -> None:
    """An empty curve or concurrency 0 is refused with a ValueError that says why."""
    with pytest.raises(ValueError, match="at least one point"):
        find_knee([])
    with pytest.raises(ValueError, match="positive"):
        find_knee([CurvePoint(0, 1.0, 0.1)])


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=10))
def test_knee_is_always_one_of_the_points(throughputs: list[float]) -> None:
    """The knee is always one of the measured points, never interpolated."""
    curve = [CurvePoint(2**i, x, 0.01) for i, x in enumerate(throughputs)]
    knee = find_knee(curve)
    assert (knee.concurrency, knee.throughput) in {(p.concurrency, p.throughput) for p in curve}
