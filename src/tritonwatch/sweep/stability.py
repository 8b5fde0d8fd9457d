"""perf_analyzer's stability rule for one concurrency step of a sweep.

A step measures in windows (a time span or a request count). It is *stable* once
the last ``count`` windows agree: max/min within ``tolerance`` (10 %) for both the
throughput and the chosen latency percentile. At most ``max_windows`` windows are
measured; a step that never settles is reported as unstable, not hidden.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

STABILITY_WINDOWS = 3
STABILITY_TOLERANCE = 0.10


@dataclass(frozen=True, slots=True)
class WindowResult:
    throughput: float
    latency_seconds: float


def _within(values: Sequence[float], tolerance: float) -> bool:
    low, high = min(values), max(values)
    if low <= 0:
        return high <= 0  # all zero is stable; zero next to non-zero is not
    return high / low <= 1.0 + tolerance


def is_stable(
    windows: Sequence[WindowResult],
    count: int = STABILITY_WINDOWS,
    tolerance: float = STABILITY_TOLERANCE,
) -> bool:
    """True when the last ``count`` windows agree within ``tolerance`` on both measures."""
    if len(windows) < count:
        return False
    last = windows[-count:]
    return _within([w.throughput for w in last], tolerance) and _within(
        [w.latency_seconds for w in last], tolerance
    )
