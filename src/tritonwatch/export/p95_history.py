"""The last hour of each canary's p95, for the status page's sparkline.

The canary keeps raw latencies for 5 minutes only (:mod:`tritonwatch.state.canary_board`);
this keeps one *point* per evaluation instead: the p95 of the canary's 5-minute window
(the number the page prints and the advisor judges), so the sparkline's last point is the
p95 shown next to it. Memory is bounded by :data:`CAPACITY` points per series, two
``array('d')`` of floats (about 2 KiB a series), whatever the evaluation interval.

When a series is full, the interior point whose neighbours lie closest together goes: a
fast evaluation interval (1 s in tests) keeps every point for the first two minutes
instead of one dot per half minute, and in the steady state the points thin out to
roughly one per ``HORIZON_SECONDS / CAPACITY`` (30 s) over the whole hour.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from tritonwatch.state.canary_board import SeriesKey, SeriesSnapshot

CAPACITY = 120
HORIZON_SECONDS = 3600.0
P95_WINDOW = "5m"


@dataclass(frozen=True, slots=True)
class P95Point:
    age_seconds: float
    """How long before the reading it was evaluated."""
    p95_seconds: float


class _Series:
    __slots__ = ("at", "p95")

    def __init__(self) -> None:
        self.at = array("d")
        self.p95 = array("d")

    def add(self, at: float, p95: float, capacity: int, horizon: float) -> None:
        while self.at and self.at[0] < at - horizon:
            del self.at[0]
            del self.p95[0]
        if len(self.at) >= capacity:
            self._thin()
        self.at.append(at)
        self.p95.append(p95)

    def _thin(self) -> None:
        """Drops the interior point with the closest neighbours (the newest on a tie)."""
        at = self.at
        if len(at) < 3:
            del at[0]
            del self.p95[0]
            return
        drop = min(range(1, len(at) - 1), key=lambda i: (at[i + 1] - at[i - 1], -i))
        del at[drop]
        del self.p95[drop]


class P95History:
    """Per canary series, its p95 over the last hour; thread-safe (written by the
    evaluation job, read by the exporter's threads)."""

    def __init__(self, capacity: int = CAPACITY, horizon_seconds: float = HORIZON_SECONDS) -> None:
        if capacity < 2:
            raise ValueError(f"capacity must be at least 2, got: {capacity}")
        self._capacity = capacity
        self._horizon = horizon_seconds
        self._lock = threading.Lock()
        self._series: dict[SeriesKey, _Series] = {}

    def record(self, key: SeriesKey, at: float, p95_seconds: float) -> None:
        """One point at monotonic time ``at``."""
        with self._lock:
            series = self._series.setdefault(key, _Series())
            series.add(at, p95_seconds, self._capacity, self._horizon)

    def observe(self, snapshots: Sequence[SeriesSnapshot], at: float) -> None:
        """One evaluation's canary snapshots: a point per series with samples in its
        5-minute window (none is a gap, not a zero); series gone from the snapshot (a
        reload removed the canary) are forgotten."""
        keys = {(s.target, s.model, s.protocol) for s in snapshots}
        with self._lock:
            self._series = {k: v for k, v in self._series.items() if k in keys}
        for snap in snapshots:
            p95 = snap.window_quantiles.get(P95_WINDOW, {}).get(0.95)
            if p95 is not None:
                self.record((snap.target, snap.model, snap.protocol), at, p95)

    def points(self, key: SeriesKey, now: float) -> tuple[P95Point, ...]:
        """The series' points within the horizon before ``now``, oldest first."""
        with self._lock:
            series = self._series.get(key)
            pairs = [] if series is None else list(zip(series.at, series.p95, strict=True))
        return tuple(
            P95Point(now - at, p95) for at, p95 in pairs if now - self._horizon <= at <= now
        )
