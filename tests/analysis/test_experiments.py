"""Before/after verdicts: the bootstrap on p95 and the window rule on throughput."""

from __future__ import annotations

import random

import pytest

from tritonwatch.analysis.experiments import (
    Direction,
    Measurement,
    Verdict,
    compare,
    p95_difference_interval,
)


def _lognormal(median: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [median * rng.lognormvariate(0, 0.2) for _ in range(n)]


def test_clearly_faster_after_is_kept() -> None:
    """Halving p95 at equal throughput is kept, with a difference interval wholly below 0."""
    before = Measurement(_lognormal(0.040, 400, 1), [100, 102, 101])
    after = Measurement(_lognormal(0.020, 400, 2), [100, 99, 101])
    result = compare(before, after, budget_p95=0.05)
    assert result.p95 == Direction.BETTER
    assert result.throughput == Direction.SAME
    assert result.verdict == Verdict.KEEP
    assert result.reason == "p95 improved beyond noise"
    low, high = result.p95_difference_interval
    assert low < high < 0
    assert result.p95_after < result.p95_before


def test_same_distribution_is_inconclusive() -> None:
    """Two samples of one distribution are inconclusive, their interval straddling 0."""
    before = Measurement(_lognormal(0.030, 300, 3), [200, 205, 210])
    after = Measurement(_lognormal(0.030, 300, 4), [203, 207, 199])
    result = compare(before, after)
    assert (result.p95, result.throughput, result.verdict) == (
        Direction.SAME,
        Direction.SAME,
        Verdict.INCONCLUSIVE,
    )
    low, high = result.p95_difference_interval
    assert low < 0 < high


def test_more_throughput_at_equal_latency_is_kept_and_worse_latency_reverted() -> None:
    """More throughput at equal p95 is kept; more throughput bought with a worse p95 is reverted."""
    base = _lognormal(0.010, 300, 5)
    kept = compare(
        Measurement(base, [500, 510, 505]), Measurement(_lognormal(0.010, 300, 6), [600, 610, 590])
    )
    assert (kept.throughput, kept.verdict) == (Direction.BETTER, Verdict.KEEP)
    assert kept.throughput_after == pytest.approx(600)
    worse = compare(
        Measurement(base, [500, 510, 505]), Measurement(_lognormal(0.020, 300, 7), [700, 710, 705])
    )
    assert worse.p95 == Direction.WORSE
    assert worse.verdict == Verdict.REVERT
    assert worse.reason == "p95 got worse beyond noise"


def test_breaking_the_budget_is_reverted_even_with_more_throughput() -> None:
    """A change whose p95 breaks the budget is reverted even though throughput doubled."""
    result = compare(
        Measurement(_lognormal(0.030, 300, 8), [100, 100, 100]),
        Measurement(_lognormal(0.030, 300, 9), [200, 200, 200]),
        budget_p95=0.02,
    )
    assert result.verdict == Verdict.REVERT
    assert "breaks the budget" in result.reason


def test_interval_is_reproducible_and_too_few_samples_refused() -> None:
    """One seed gives one bootstrap interval, and fewer than 20 samples are refused."""
    a, b = _lognormal(0.01, 100, 10), _lognormal(0.012, 100, 11)
    assert p95_difference_interval(a, b, seed=3) == p95_difference_interval(a, b, seed=3)
    with pytest.raises(ValueError, match="at least 20"):
        compare(Measurement([0.01] * 5), Measurement([0.01] * 50))
