"""Bad/total event counts per SLO series in time buckets: bounded, and kept across restarts.

Two rings per series, both bounded (they grow to their capacity as history arrives):

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
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from tritonwatch.analysis.slo import EventCounts, SliSource, SLOKind

FINE_RESOLUTION_SECONDS = 60.0
FINE_BUCKETS = 3 * 24 * 60
COARSE_RESOLUTION_SECONDS = 3600.0
COARSE_BUCKETS = 31 * 24
FILE_FORMAT = "tritonwatch-slo-events"
FILE_VERSION = 1
_NO_EVENTS = EventCounts(0.0, 0.0)


class SeriesKey(NamedTuple):
    """One SLI's events: an SLO of a model, from one source."""

    target: str
    model: str
    slo: SLOKind
    source: SliSource


class BucketRing:
    """``capacity`` buckets of ``resolution`` seconds; bucket ``i`` covers
    [i·resolution, (i+1)·resolution). The ring holds the ``capacity`` buckets up to the
    newest one it was given, and forgets older ones.

    It stores running totals, not counts: ``_bad[k]`` and ``_total[k]`` are the events of
    every held bucket up to and including bucket ``_origin + k``, so any window is two
    subtractions and its oldest bucket a third, whatever its length. The daemon asks
    for seven windows and the SLO period of every series every evaluation; summing the
    buckets instead made that a measurable share of its idle CPU (issue 15). Entry 0 is
    the total before the oldest held bucket (the base), so the ring keeps
    ``capacity + 1`` entries, plus up to ``capacity // 32`` of buckets that already left
    (dropped in batches; never read). It grows to that as buckets arrive, so a young
    ring (or a series without events) costs next to nothing. Plain ``array('d')``: 16
    bytes a bucket, no numpy.
    """

    __slots__ = ("_bad", "_origin", "_rebased_at", "_total", "capacity", "resolution")

    def __init__(self, resolution: float, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got: {capacity}")
        self.resolution = resolution
        self.capacity = capacity
        self._origin = 0
        """The bucket whose running total ``_bad[0]``/``_total[0]`` holds (the base)."""
        self._rebased_at = 0
        self._bad = array("d")
        self._total = array("d")

    @property
    def span_seconds(self) -> float:
        return self.resolution * self.capacity

    @property
    def _newest(self) -> int:
        """The newest bucket held (meaningless while the ring is empty)."""
        return self._origin + len(self._total) - 1

    def _bucket(self, at: float) -> int:
        return math.floor(at / self.resolution)

    def add(self, at: float, bad: float, total: float) -> None:
        """Counts events that happened at Unix time ``at``."""
        self._add_to_bucket(self._bucket(at), bad, total)

    def _add_to_bucket(self, bucket: int, bad: float, total: float) -> None:
        totals = self._total
        if bucket == self._origin + len(totals) - 1 and totals:  # the newest: the usual case
            self._bad[-1] += bad
            totals[-1] += total
            return
        if not totals:
            self._reset(bucket)
        elif bucket > self._newest:
            self._advance(bucket)
        elif bucket <= self._newest - self.capacity:
            return  # older than the ring reaches (the wall clock went back a long way)
        elif bucket <= self._origin:
            self._prepend(bucket)
        # Every running total from ``bucket`` on includes the new events: one entry for
        # a bucket just begun, more for a late one.
        bads, totals = self._bad, self._total
        for index in range(bucket - self._origin, len(totals)):
            bads[index] += bad
            totals[index] += total

    def _reset(self, bucket: int) -> None:
        """Empties the ring down to a base just before ``bucket``."""
        self._origin = self._rebased_at = bucket - 1
        self._bad = array("d", (0.0, 0.0))
        self._total = array("d", (0.0, 0.0))

    def _advance(self, bucket: int) -> None:
        """Makes ``bucket`` the newest: the buckets in between are empty (running totals
        carried forward), and those that fall out of the ring leave, the last of them
        becoming the base."""
        gap = bucket - self._newest
        if gap > self.capacity:
            self._reset(bucket)
            return
        bads, totals = self._bad, self._total
        if gap == 1:
            bads.append(bads[-1])
            totals.append(totals[-1])
        else:
            bads.extend(array("d", (bads[-1],)) * gap)
            totals.extend(array("d", (totals[-1],)) * gap)
        # Buckets that left the ring are dropped from the arrays a few dozen at a time,
        # not one a minute: each drop moves the whole array down.
        excess = len(totals) - (self.capacity + 1)
        if excess > self.capacity // 32:
            del bads[:excess], totals[:excess]
            self._origin += excess
            if self._origin - self._rebased_at >= self.capacity:
                self._rebase()

    def _rebase(self) -> None:
        """Subtracts the base from every running total, once per ``capacity`` buckets
        (amortised O(1) a bucket), so the totals stay the size of a ring's worth of
        events instead of growing with the daemon's uptime and losing precision."""
        bad_base, total_base = self._bad[0], self._total[0]
        self._bad = array("d", (v - bad_base for v in self._bad))
        self._total = array("d", (v - total_base for v in self._total))
        self._rebased_at = self._origin

    def _prepend(self, bucket: int) -> None:
        """Reaches back to ``bucket`` (still within the ring's capacity from the newest):
        empty buckets before the oldest held one, at the base's running total."""
        missing = self._origin - bucket + 1
        self._bad[0:0] = array("d", (self._bad[0],)) * missing
        self._total[0:0] = array("d", (self._total[0],)) * missing
        self._origin = bucket - 1

    def counts(self, start: float, end: float) -> EventCounts:
        """Events in [start, end]; the oldest bucket weighted by its overlap."""
        return self.windows((start,), end)[0]

    def windows(self, starts: Iterable[float], end: float) -> list[EventCounts]:
        """:meth:`counts` from each of ``starts`` to ``end``, for the evaluator's windows
        that all end now.

        Three reads of each running total a window, whatever its length: the newest
        bucket inside it (shared by all of them), its oldest, and the one before that.
        """
        totals, bads, resolution = self._total, self._bad, self.resolution
        newest = self._origin + len(totals) - 1
        origin = max(self._origin, newest - self.capacity)  # the base of the held buckets
        hi = min(math.floor(end / resolution), newest)
        if hi <= origin:  # empty, or ``end`` is before the oldest bucket held
            return [_NO_EVENTS for _ in starts]
        bad_end, total_end = bads[hi - self._origin], totals[hi - self._origin]
        found = []
        for start in starts:
            first = math.floor(start / resolution)
            if first > hi:
                found.append(_NO_EVENTS)
                continue
            if first > origin:
                weight = ((first + 1) * resolution - start) / resolution
            else:  # the window starts before the oldest bucket held: that one is whole
                first, weight = origin + 1, 1.0
            i = first - self._origin
            found.append(
                EventCounts(
                    bad_end - bads[i] + weight * (bads[i] - bads[i - 1]),
                    total_end - totals[i] + weight * (totals[i] - totals[i - 1]),
                )
            )
        return found

    def buckets(self) -> list[tuple[int, float, float]]:
        """(bucket, bad, total) of every held bucket that had events, oldest first."""
        bads, totals, origin = self._bad, self._total, self._origin
        held = []
        for index in range(max(1, len(totals) - self.capacity), len(totals)):
            bad, total = bads[index] - bads[index - 1], totals[index] - totals[index - 1]
            if bad or total:
                held.append((origin + index, bad, total))
        return held

    def merge(self, other: BucketRing) -> None:
        """Adds the events of ``other`` (same resolution) to this ring."""
        self._merge(other.buckets())

    def _merge(self, buckets: list[tuple[int, float, float]]) -> None:
        """Adds ``buckets`` (bucket, bad, total; oldest first) in one pass: each added
        bucket would otherwise update every running total after it, which for a whole
        saved ring merged under a few fresh events is quadratic."""
        if not buckets:
            return
        combined: dict[int, tuple[float, float]] = {}
        for bucket, bad, total in self.buckets() + buckets:
            held = combined.get(bucket)
            combined[bucket] = (bad, total) if held is None else (held[0] + bad, held[1] + total)
        newest = max(combined)
        if self._total:
            newest = max(newest, self._newest)  # an empty newest bucket stays the newest
        oldest = max(min(combined), newest - self.capacity + 1)
        self._reset(oldest)
        bads, totals = self._bad, self._total
        bads.extend(array("d", (0.0,)) * (newest - oldest))
        totals.extend(array("d", (0.0,)) * (newest - oldest))
        running_bad = running_total = 0.0
        for index in range(1, len(totals)):
            bad, total = combined.get(self._origin + index, (0.0, 0.0))
            running_bad += bad
            running_total += total
            bads[index], totals[index] = running_bad, running_total

    def to_document(self) -> dict[str, Any]:
        """The buckets from the oldest that had events to the newest, as dense lists.

        The format of the first version (which kept one slot per bucket), so state
        files written before and after issue 15 load in either.
        """
        held = self.buckets()
        if not held:
            return {"resolution": self.resolution, "first": 0, "bad": [], "total": []}
        first = held[0][0]
        length = held[-1][0] - first + 1
        bad, total = [0.0] * length, [0.0] * length
        for bucket, b, t in held:
            bad[bucket - first], total[bucket - first] = b, t
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
        self._merge(
            [
                (first + offset, float(b), float(t))
                for offset, (b, t) in enumerate(zip(bad, total, strict=True))
                if t
            ]
        )


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
        return self.counts_many(key, (seconds,), now)[0]

    def counts_many(self, key: SeriesKey, spans: Sequence[float], now: float) -> list[EventCounts]:
        """:meth:`counts` for each of ``spans`` (seconds), under one lock: the evaluator
        asks for every window and the period of every series each round."""
        with self._lock:
            series = self._series.get(key)
            if series is None:
                return [_NO_EVENTS] * len(spans)
            reach = series.fine.span_seconds
            fine = iter(series.fine.windows([now - s for s in spans if s <= reach], now))
            coarse = iter(series.coarse.windows([now - s for s in spans if s > reach], now))
            return [next(fine) if s <= reach else next(coarse) for s in spans]

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
                    entry["target"],
                    entry["model"],
                    SLOKind(entry["slo"]),
                    SliSource(entry["source"]),
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
