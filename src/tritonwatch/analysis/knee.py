"""The knee and the operating point of a concurrency sweep.

**Knee** — the largest concurrency whose throughput still grows meaningfully per
added request in flight. With points sorted by concurrency ``c`` and throughput
``x``, the marginal gain of step ``i`` is ``(x[i] - x[i-1]) / (c[i] - c[i-1])``,
compared with the throughput per request in flight at the first point,
``x[0] / c[0]`` (what one more request bought when the server was idle). A step is
*meaningful* when its gain is at least ``min_gain_ratio`` (10 % by default) of that.
The knee is the last point reached by a meaningful step; if the last step is still
meaningful the curve never flattened and ``reached`` is False (sweep further).

**Operating point** — the point with the highest throughput whose p95 is within
the budget; throughputs within 2 % of the best count as equal (noise), and the
lowest concurrency among them wins (same work, less queueing).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from tritonwatch.records.sweep_records import CurvePoint, Knee

DEFAULT_MIN_GAIN_RATIO = 0.10
DEFAULT_THROUGHPUT_TOLERANCE = 0.02


def find_knee(points: Sequence[CurvePoint], min_gain_ratio: float = DEFAULT_MIN_GAIN_RATIO) -> Knee:
    """Applies the marginal-gain rule above to ``points`` (any order).

    Raises:
        ValueError: with no points or non-positive concurrencies.
    """
    curve = sorted(points, key=lambda p: p.concurrency)
    if not curve:
        raise ValueError("a knee needs at least one point")
    if curve[0].concurrency <= 0:
        raise ValueError("concurrency must be positive")
    reference_gain = curve[0].throughput / curve[0].concurrency
    knee = curve[0]
    last_step_meaningful = False
    for previous, point in pairwise(curve):
        step = point.concurrency - previous.concurrency
        if step <= 0:
            continue
        gain = (point.throughput - previous.throughput) / step
        last_step_meaningful = reference_gain > 0 and gain >= min_gain_ratio * reference_gain
        if last_step_meaningful:
            knee = point
    reached = len(curve) > 1 and not last_step_meaningful
    return Knee(knee.concurrency, knee.throughput, reached)


def operating_point(
    points: Sequence[CurvePoint],
    budget_p95_seconds: float,
    tolerance: float = DEFAULT_THROUGHPUT_TOLERANCE,
) -> CurvePoint | None:
    """The best in-budget point, or None when every point breaks the budget.

    Throughputs within ``tolerance`` (2 %) of the best count as equal — measurement
    noise — and among those the lowest concurrency wins: the same work with less
    queueing and more headroom.
    """
    inside = [p for p in points if p.p95_seconds <= budget_p95_seconds]
    if not inside:
        return None
    best = max(p.throughput for p in inside)
    near_best = [p for p in inside if p.throughput >= best * (1.0 - tolerance)]
    return min(near_best, key=lambda p: p.concurrency)
