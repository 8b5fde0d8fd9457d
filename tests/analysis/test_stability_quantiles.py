"""perf_analyzer's stability rule and nearest-rank percentiles."""

from __future__ import annotations

import pytest

from tritonwatch.records.quantiles import nearest_rank, quantiles
from tritonwatch.sweep.stability import WindowResult, is_stable

pytestmark = pytest.mark.real


def test_three_agreeing_windows_are_stable() -> None:
    """Stability needs three agreeing windows in a row; two are not enough."""
    windows = [WindowResult(50, 0.2), WindowResult(100, 0.010), WindowResult(105, 0.0105)]
    assert not is_stable(windows)  # only two windows agree so far
    windows.append(WindowResult(109, 0.0109))
    assert is_stable(windows)


def test_throughput_or_latency_drift_over_ten_percent_is_unstable() -> None:
    """Throughput or latency drifting over 10 % across the windows is not stable."""
    assert not is_stable(
        [WindowResult(100, 0.01), WindowResult(100, 0.01), WindowResult(111, 0.01)]
    )
    assert not is_stable(
        [WindowResult(100, 0.01), WindowResult(100, 0.0112), WindowResult(100, 0.01)]
    )


def test_idle_windows_are_stable_and_zero_beside_traffic_is_not() -> None:
    """Idle windows are stable; a zero-throughput window beside traffic is not."""
    assert is_stable([WindowResult(0, 0)] * 3)
    assert not is_stable([WindowResult(0, 0.01), WindowResult(10, 0.01), WindowResult(10, 0.01)])


def test_nearest_rank_matches_hand_computed_ranks() -> None:
    """Percentiles are nearest-rank, neither interpolated nor off by one rank."""
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert nearest_rank(values, 0.5) == 50.0
    assert nearest_rank(values, 0.95) == 95.0
    assert nearest_rank(values, 0.99) == 99.0
    assert nearest_rank(values, 1.0) == 100.0
    assert nearest_rank([7.0], 0.95) == 7.0
    assert quantiles([3.0, 1.0, 2.0], (0.5, 0.9)) == {0.5: 2.0, 0.9: 3.0}
    assert quantiles([]) == {}


def test_bad_quantile_requests() -> None:
    """A percentile of no values, or quantile 0, is refused with a ValueError."""
    with pytest.raises(ValueError, match="no values"):
        nearest_rank([], 0.5)
    with pytest.raises(ValueError, match="quantile must be"):
        nearest_rank([1.0], 0.0)
