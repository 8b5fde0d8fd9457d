"""The daemon's SLO state: which SLOs exist, where their events come from, what they say.

Events come from two sources (docs/design.md §6):

* the canary, read as periodic snapshots of its cumulative counters: latency good =
  the histogram bucket at ``le = threshold``, total = the histogram count (the same
  numbers the generated Prometheus rules use); availability good = ``success``
  outcomes, total = every outcome but those in
  :data:`~tritonwatch.records.observations.NOT_THE_SERVERS` (a request our own client could not
  read says nothing about the server: ``client_error``); TTFT and ITL likewise from
  the streaming canary's histograms (:class:`~tritonwatch.state.stream_board.StreamBoard`:
  one TTFT per successful stream, one ITL per gap between its tokens);
* the server, for availability only, from Triton's success and failure counters
  (:class:`~tritonwatch.records.observations.ModelRates`, rate × interval), summed over the
  model's versions. A server that prints no failure family gives no server SLI.

The cumulative canary counters restart when the daemon restarts or a reload changes
the histogram's buckets; a counter that went down, or a histogram whose bounds
changed, is taken to have restarted from zero, as Prometheus' ``rate()`` does
(:func:`~tritonwatch.records.counters.counter_increase`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tritonwatch.analysis.sli_counts import availability_counts, bucket_index
from tritonwatch.analysis.slo import (
    WINDOWS,
    SliSource,
    SLOKind,
    SLOSpec,
    SLOStatus,
    evaluate_slo,
)
from tritonwatch.common.logs import get_logger
from tritonwatch.records.counters import counter_increase
from tritonwatch.records.observations import TritonRates
from tritonwatch.runtime.slo_event_store import SeriesKey, SLOEventStore
from tritonwatch.state.canary_board import SeriesSnapshot
from tritonwatch.state.stream_board import StreamSnapshot

_log = get_logger("slo")


@dataclass(frozen=True, slots=True)
class _HistogramTotals:
    """The cumulative counts of one histogram that a threshold SLI needs."""

    bounds: tuple[float, ...]
    count: float
    buckets: tuple[int, ...]

    def restarted_since(self, previous: _HistogramTotals) -> bool:
        """The histogram began again: fewer observations, or other bounds (a reload)."""
        return self.count < previous.count or self.bounds != previous.bounds

    def empty(self) -> _HistogramTotals:
        """The same histogram before its first observation (how series are declared)."""
        return _HistogramTotals(self.bounds, 0.0, (0,) * len(self.buckets))


@dataclass(frozen=True, slots=True)
class _CanaryTotals:
    """The cumulative counts of one canary series that the SLIs need."""

    requests: float
    successes: float
    latency: _HistogramTotals


def _threshold_events(
    previous: _HistogramTotals, current: _HistogramTotals, threshold: float, reset: bool
) -> tuple[float, float] | None:
    """(bad, total) observations since ``previous``: good = the growth of the bucket at
    ``le = threshold``; None when the threshold is not one of the bounds."""
    index = bucket_index(current.bounds, threshold)
    if index is None or len(current.buckets) != len(current.bounds) + 1:
        return None
    old_good = 0.0 if reset else float(previous.buckets[index])
    total = counter_increase(previous.count, current.count, reset) or 0.0
    good = counter_increase(old_good, float(current.buckets[index]), reset) or 0.0
    return total - good, total


def _series_keys(spec: SLOSpec) -> list[SeriesKey]:
    keys = [SeriesKey(spec.target, spec.model, spec.kind, SliSource.CANARY)]
    if spec.kind == SLOKind.AVAILABILITY:
        keys.append(SeriesKey(spec.target, spec.model, spec.kind, SliSource.SERVER))
    return keys


class SLOTracker:
    """Feeds an :class:`SLOEventStore` and evaluates every configured SLO.

    Args:
        specs: the SLOs (:func:`~tritonwatch.analysis.slo.slo_specs`).
        state_file: where events persist across restarts; None keeps them in memory only.
        clock: Unix seconds.
    """

    def __init__(
        self,
        specs: Iterable[SLOSpec],
        *,
        state_file: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._state_file = state_file
        self.store = SLOEventStore()
        self._specs: tuple[SLOSpec, ...] = ()
        self._canary_totals: dict[tuple[str, str, str], _CanaryTotals] = {}
        self._stream_totals: dict[tuple[str, str, str, SLOKind], _HistogramTotals] = {}
        self._missing_buckets_logged: set[tuple[str, str, SLOKind]] = set()
        self.set_specs(specs)

    def set_specs(self, specs: Iterable[SLOSpec]) -> None:
        """Replaces the SLOs (config reload); series of SLOs that remain keep their events."""
        specs = tuple(specs)
        self.store.declare(key for spec in specs for key in _series_keys(spec))
        models = {(spec.target, spec.model) for spec in specs}
        with self._lock:
            self._specs = specs
            self._canary_totals = {
                k: v for k, v in self._canary_totals.items() if (k[0], k[1]) in models
            }
            self._stream_totals = {
                k: v for k, v in self._stream_totals.items() if (k[0], k[1]) in models
            }

    @property
    def specs(self) -> tuple[SLOSpec, ...]:
        with self._lock:
            return self._specs

    def observe_canary(
        self, snapshots: Sequence[SeriesSnapshot], buckets: Sequence[float], at: float | None = None
    ) -> None:
        """Adds what the canary counted since the previous snapshot.

        Args:
            snapshots: :meth:`CanaryBoard.snapshot` output.
            buckets: the histogram's upper bounds (:attr:`CanaryBoard.buckets`).
            at: Unix time of the snapshot; the clock by default.
        """
        now = self._clock() if at is None else at
        specs = {(s.target, s.model, s.kind): s for s in self.specs}
        for snap in snapshots:
            availability = specs.get((snap.target, snap.model, SLOKind.AVAILABILITY))
            latency = _HistogramTotals(
                tuple(buckets), float(snap.latency_count), snap.bucket_counts
            )
            current = _CanaryTotals(*availability_counts(snap.outcomes), latency)
            with self._lock:
                previous = self._canary_totals.get((snap.target, snap.model, snap.protocol))
                self._canary_totals[(snap.target, snap.model, snap.protocol)] = current
            # A series seen for the first time was declared at zero by CanaryBoard.
            previous = previous or _CanaryTotals(0.0, 0.0, latency.empty())
            reset = current.requests < previous.requests or latency.restarted_since(
                previous.latency
            )
            if availability is not None:
                total = counter_increase(previous.requests, current.requests, reset) or 0.0
                good = counter_increase(previous.successes, current.successes, reset) or 0.0
                key = SeriesKey(snap.target, snap.model, SLOKind.AVAILABILITY, SliSource.CANARY)
                self.store.add(key, now, total - good, total)
            self._add_threshold_events(
                specs.get((snap.target, snap.model, SLOKind.LATENCY)),
                previous.latency,
                latency,
                reset,
                now,
            )

    def observe_stream(
        self,
        snapshots: Sequence[StreamSnapshot],
        ttft_buckets: Sequence[float],
        itl_buckets: Sequence[float],
        at: float | None = None,
    ) -> None:
        """Adds what the streaming canary timed since the previous snapshot: first
        tokens for the TTFT SLO, gaps between tokens for the ITL SLO.

        Args:
            snapshots: :meth:`StreamBoard.snapshot` output.
            ttft_buckets: the TTFT histogram's upper bounds (:attr:`StreamBoard.ttft_buckets`).
            itl_buckets: the ITL histogram's upper bounds (:attr:`StreamBoard.itl_buckets`).
            at: Unix time of the snapshot; the clock by default.
        """
        now = self._clock() if at is None else at
        specs = {(s.target, s.model, s.kind): s for s in self.specs}
        for snap in snapshots:
            measures = (
                (SLOKind.TTFT, snap.ttft, ttft_buckets),
                (SLOKind.ITL, snap.itl, itl_buckets),
            )
            for kind, histogram, buckets in measures:
                current = _HistogramTotals(
                    tuple(buckets), float(histogram.count), histogram.bucket_counts
                )
                series = (snap.target, snap.model, snap.protocol, kind)
                with self._lock:
                    previous = self._stream_totals.get(series)
                    self._stream_totals[series] = current
                # A series seen for the first time was declared at zero by StreamBoard.
                previous = previous or current.empty()
                reset = current.restarted_since(previous)
                spec = specs.get((snap.target, snap.model, kind))
                self._add_threshold_events(spec, previous, current, reset, now)

    def _add_threshold_events(
        self,
        spec: SLOSpec | None,
        previous: _HistogramTotals,
        current: _HistogramTotals,
        reset: bool,
        now: float,
    ) -> None:
        """Stores the events of a latency, TTFT or ITL SLO (if configured) since ``previous``."""
        if spec is None or spec.threshold_seconds is None:
            return
        events = _threshold_events(previous, current, spec.threshold_seconds, reset)
        if events is None:
            self._log_missing_bucket(spec)
            return
        bad, total = events
        key = SeriesKey(spec.target, spec.model, spec.kind, SliSource.CANARY)
        self.store.add(key, now, bad, total)

    def _log_missing_bucket(self, spec: SLOSpec) -> None:
        if (spec.target, spec.model, spec.kind) not in self._missing_buckets_logged:
            self._missing_buckets_logged.add((spec.target, spec.model, spec.kind))
            _log.error(
                "slo_threshold_not_a_bucket",
                target=spec.target,
                model=spec.model,
                slo=str(spec.kind),
                threshold_seconds=spec.threshold_seconds,
            )

    def observe_server(self, target: str, rates: TritonRates, at: float | None = None) -> None:
        """Adds the requests Triton completed between two scrapes of ``target``."""
        now = self._clock() if at is None else at
        for spec in self.specs:
            if spec.target != target or spec.kind != SLOKind.AVAILABILITY:
                continue
            good = bad = 0.0
            seen = False
            for model_key, model in rates.models.items():
                if model_key.model != spec.model:
                    continue
                if model.requests_per_second is None or model.failures_per_second is None:
                    continue
                seen = True
                good += model.requests_per_second * model.interval_seconds
                bad += model.failures_per_second * model.interval_seconds
            if seen:
                series = SeriesKey(target, spec.model, SLOKind.AVAILABILITY, SliSource.SERVER)
                self.store.add(series, now, bad, good + bad)

    def evaluate(self, now: float | None = None) -> list[SLOStatus]:
        """Every SLO from every source that has events in its longest window or period."""
        now = self._clock() if now is None else now
        statuses = []
        for spec in self.specs:
            spans = [*WINDOWS.values(), spec.period_seconds]
            for key in _series_keys(spec):
                *window_counts, period = self.store.counts_many(key, spans, now)
                windows = dict(zip(WINDOWS, window_counts, strict=True))
                if period.total <= 0 and all(c.total <= 0 for c in windows.values()):
                    continue
                statuses.append(evaluate_slo(spec, key.source, windows, period))
        return statuses

    def save(self) -> None:
        """Persists the events (on a schedule and at stop); a failure is logged, not raised."""
        if self._state_file is None:
            return
        try:
            self.store.save(self._state_file, self._clock())
        except OSError as error:
            _log.error("slo_state_save_failed", path=str(self._state_file), error=str(error))

    def saved_streams(self) -> frozenset[tuple[str, str]]:
        """``(target, model)`` of every TTFT or ITL series the state file holds: models
        that streamed before a restart. Their stream SLOs must be declared before
        :meth:`load` keeps their events (the canary finds them streaming again only once it
        has read their config). Empty when there is no readable file."""
        if self._state_file is None or not self._state_file.exists():
            return frozenset()
        try:
            document = json.loads(self._state_file.read_text(encoding="utf-8"))
            return frozenset(
                (entry["target"], entry["model"])
                for entry in document["series"]
                if entry["slo"] in (SLOKind.TTFT, SLOKind.ITL)
            )
        except (OSError, ValueError, KeyError, TypeError):
            return frozenset()  # load() says why, when it fails too

    def load(self) -> None:
        """Reads the events saved by a previous run; a missing or bad file starts empty."""
        if self._state_file is None or not self._state_file.exists():
            return
        try:
            loaded = self.store.load(self._state_file)
        except (OSError, ValueError) as error:
            _log.warning("slo_state_unreadable", path=str(self._state_file), error=str(error))
            return
        _log.info("slo_state_loaded", path=str(self._state_file), series=loaded)
