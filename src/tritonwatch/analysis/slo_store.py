"""Bad/total event counts per SLO series in time buckets: bounded, and kept across restarts.

Two rings per series, both fixed-size:

* 1-minute buckets for 3 days (4 320 buckets) answer the burn-rate windows (5m … 3d);
* 1-hour buckets for 31 days (744 buckets) answer the error budget over a 28- or 30-day
  period.

A window [now − W, now] sums the buckets it overlaps, and weights the oldest one by the
fraction of it inside the window (events are taken as spread evenly in a bucket), so a
"5m" window means five minutes, not four to five. The store keeps its rings in a JSON
file (:meth:`SLOEventStore.save`, atomic rename) and reads them back at start, so a
restarted daemon still sees the burn that was going on before it stopped: the downtime
itself is a gap with no events, which windows simply skip. Timestamps are Unix seconds
(wall clock), the only clock that means the same thing before and after a restart.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from tritonwatch.analysis.slo import EventCounts, SLOKind, Source

FINE_RESOLUTION_SECONDS = 60.0
FINE_BUCKETS = 3 * 24 * 60
COARSE_RESOLUTION_SECONDS = 3600.0
COARSE_BUCKETS = 31 * 24
FILE_FORMAT = "tritonwatch-slo-events"
FILE_VERSION = 1


class SeriesKey(NamedTuple):
    """One SLI's events: an SLO of a model, from one source."""

    target: str
    model: str
    slo: SLOKind
    source: Source


class BucketRing:
    """``capacity`` buckets of ``resolution`` seconds; bucket ``i`` covers
    [i·resolution, (i+1)·resolution) and lives in slot ``i % capacity``."""

    def __init__(self, resolution: float, capacity: int) -> None:
        self.resolution = resolution
        self.capacity = capacity
        self._ids: npt.NDArray[np.int64] = np.full(capacity, -1, dtype=np.int64)
        self._bad: npt.NDArray[np.float64] = np.zeros(capacity)
        self._total: npt.NDArray[np.float64] = np.zeros(capacity)

    @property
    def span_seconds(self) -> float:
        return self.resolution * self.capacity

    def _bucket(self, at: float) -> int:
        return math.floor(at / self.resolution)

    def add(self, at: float, bad: float, total: float) -> None:
        """Counts events that happened at Unix time ``at``."""
        self._add_to_bucket(self._bucket(at), bad, total)

    def _add_to_bucket(self, bucket: int, bad: float, total: float) -> None:
        slot = bucket % self.capacity
        if self._ids[slot] != bucket:
            if self._ids[slot] > bucket:
                return  # older than the ring reaches (the wall clock went back a long way)
            self._ids[slot] = bucket
            self._bad[slot] = 0.0
            self._total[slot] = 0.0
        self._bad[slot] += bad
        self._total[slot] += total

    def counts(self, start: float, end: float) -> EventCounts:
        """Events in [start, end]; the oldest bucket weighted by its overlap.

        Only the slots that buckets ``first…last`` map to are read (one or two slices of
        the ring), not all of it: a 5-minute window reads 6 slots of 4 320. The daemon
        asks this for every SLO series and window every evaluation, so reading the whole
        ring each time was a measurable share of its idle CPU (issue 15).
        """
        first, last = self._bucket(start), self._bucket(end)
        oldest_share = ((first + 1) * self.resolution - start) / self.resolution
        bad = total = 0.0
        for lo, hi in self._slot_ranges(first, last):
            ids = self._ids[lo:hi]
            inside = (ids >= first) & (ids <= last)
            weights = np.where(ids == first, oldest_share, 1.0) * inside
            bad += float(self._bad[lo:hi] @ weights)
            total += float(self._total[lo:hi] @ weights)
        return EventCounts(bad, total)

    def _slot_ranges(self, first: int, last: int) -> list[tuple[int, int]]:
        """The slot slices where buckets ``first…last`` live: all slots once the range
        is as long as the ring, else one slice or two (when it wraps)."""
        span = last - first + 1
        if span <= 0:
            return []
        if span >= self.capacity:
            return [(0, self.capacity)]
        lo = first % self.capacity
        hi = lo + span
        if hi <= self.capacity:
            return [(lo, hi)]
        return [(lo, self.capacity), (0, hi - self.capacity)]

    def merge(self, other: BucketRing) -> None:
        """Adds the events of ``other`` (same resolution) to this ring."""
        for slot in np.flatnonzero(other._ids >= 0):
            self._add_to_bucket(int(other._ids[slot]), other._bad[slot], other._total[slot])

    def to_document(self) -> dict[str, Any]:
        """The valid buckets as dense lists from the oldest to the newest."""
        newest = int(self._ids.max())
        valid = self._ids > max(newest - self.capacity, -1)
        ids = self._ids[valid]
        if ids.size == 0:
            return {"resolution": self.resolution, "first": 0, "bad": [], "total": []}
        first = int(ids.min())
        bad, total = [0.0] * (newest - first + 1), [0.0] * (newest - first + 1)
        for bucket, b, t in zip(ids, self._bad[valid], self._total[valid], strict=True):
            bad[int(bucket) - first], total[int(bucket) - first] = float(b), float(t)
        return {
            "resolution": self.resolution,
            "first": first,
            "bad": [_compact(v) for v in bad],
            "total": [_compact(v) for v in total],
        }

    def load_document(self, document: dict[str, Any]) -> None:
        """Adds the buckets of :meth:`to_document`'s output (same resolution only).

        Raises:
            ValueError: the document does not describe a ring of this resolution.
        """
        if float(document["resolution"]) != self.resolution:
            raise ValueError(f"resolution must be {self.resolution}, got: {document['resolution']}")
        first, bad, total = int(document["first"]), document["bad"], document["total"]
        if len(bad) != len(total):
            raise ValueError("bad and total must have the same length")
        for offset, (b, t) in enumerate(zip(bad, total, strict=True)):
            if t:
                self._add_to_bucket(first + offset, float(b), float(t))


def _compact(value: float) -> float | int:
    """Whole counts as ints, to keep the state file short."""
    return int(value) if value.is_integer() else round(value, 6)


class _Series:
    __slots__ = ("coarse", "fine")

    def __init__(self) -> None:
        self.fine = BucketRing(FINE_RESOLUTION_SECONDS, FINE_BUCKETS)
        self.coarse = BucketRing(COARSE_RESOLUTION_SECONDS, COARSE_BUCKETS)


class SLOEventStore:
    """Thread-safe bad/total counts for every declared :class:`SeriesKey`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: dict[SeriesKey, _Series] = {}

    def declare(self, keys: Iterable[SeriesKey]) -> None:
        """Keeps only ``keys`` (the configured SLOs), adding the new ones empty."""
        wanted = set(keys)
        with self._lock:
            self._series = {k: v for k, v in self._series.items() if k in wanted}
            for key in wanted - self._series.keys():
                self._series[key] = _Series()

    def keys(self) -> list[SeriesKey]:
        with self._lock:
            return sorted(self._series)

    def add(self, key: SeriesKey, at: float, bad: float, total: float) -> None:
        """Counts ``total`` events, ``bad`` of them bad, at Unix time ``at``; events of an
        undeclared key (a model a reload just removed) are dropped."""
        if total <= 0:
            return
        with self._lock:
            series = self._series.get(key)
            if series is not None:
                series.fine.add(at, bad, total)
                series.coarse.add(at, bad, total)

    def counts(self, key: SeriesKey, seconds: float, now: float) -> EventCounts:
        """Events of ``key`` over the last ``seconds`` before ``now``: from the minute
        ring when it reaches that far, else from the hour ring."""
        with self._lock:
            series = self._series.get(key)
            if series is None:
                return EventCounts(0.0, 0.0)
            ring = series.fine if seconds <= series.fine.span_seconds else series.coarse
            return ring.counts(now - seconds, now)

    def save(self, path: Path, now: float) -> None:
        """Writes every series to ``path`` atomically (temporary file, then rename)."""
        with self._lock:
            series = [
                {
                    **key._asdict(),
                    "fine": rings.fine.to_document(),
                    "coarse": rings.coarse.to_document(),
                }
                for key, rings in sorted(self._series.items())
            ]
        document = {"format": FILE_FORMAT, "version": FILE_VERSION, "saved_at": now}
        document["series"] = series
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(json.dumps(document, separators=(",", ":")), encoding="utf-8")
        temporary.replace(path)

    def load(self, path: Path) -> int:
        """Adds the events saved in ``path`` to the declared series; returns how many
        series it restored. Series of undeclared keys are skipped: load after declaring.

        Raises:
            OSError: the file cannot be read.
            ValueError: it is not a state file of this version (the caller logs and
                starts empty: losing history must never stop the daemon).
        """
        document = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(document, dict) or (
            document.get("format"),
            document.get("version"),
        ) != (FILE_FORMAT, FILE_VERSION):
            raise ValueError(f"{path} is not a {FILE_FORMAT} file of version {FILE_VERSION}")
        with self._lock:
            declared = set(self._series)
        restored: dict[SeriesKey, _Series] = {}
        try:
            for entry in document["series"]:
                key = SeriesKey(
                    entry["target"], entry["model"], SLOKind(entry["slo"]), Source(entry["source"])
                )
                if key in declared:
                    series = restored[key] = _Series()
                    series.fine.load_document(entry["fine"])
                    series.coarse.load_document(entry["coarse"])
        except (KeyError, TypeError) as error:
            raise ValueError(f"{path} is damaged: {error!r}") from error
        # All or nothing: a file that fails half-way leaves the store as it was. Merged,
        # not replaced, so events counted before the load are kept too.
        with self._lock:
            for key, series in restored.items():
                if key in self._series:
                    self._series[key].fine.merge(series.fine)
                    self._series[key].coarse.merge(series.coarse)
        loaded = len(restored)
        return loaded
