"""What the canary has measured, per (target, model, protocol), ready for export and SLOs.

Written from the canary's event-loop thread, read at scrape time from the exporter's
threads: every access goes through one lock, and readers get immutable snapshots.
Latencies are kept exactly for the longest quantile window (5 minutes): at canary
rates that is hundreds of samples, so exact nearest-rank quantiles are cheap.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from tritonwatch.records.observations import NOT_THE_SERVERS, CanaryResult, Outcome
from tritonwatch.records.quantiles import DEFAULT_QUANTILES, quantiles

DEFAULT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
QUANTILE_WINDOWS = {"1m": 60.0, "5m": 300.0}
_LONGEST_WINDOW = max(QUANTILE_WINDOWS.values())

SeriesKey = tuple[str, str, str]
"""(target, model, protocol)."""


def latency_buckets(
    thresholds: Iterable[float], defaults: Sequence[float] = DEFAULT_BUCKETS
) -> tuple[float, ...]:
    """Histogram upper bounds: the defaults plus every SLO threshold *exactly*, so that
    ``rate(..._bucket{le="<threshold>"})`` is the SLI with no interpolation."""
    return tuple(sorted(set(defaults) | {round(t, 9) for t in thresholds}))


def bucket_index(buckets: Sequence[float], value: float) -> int:
    """Which non-cumulative bucket ``value`` falls in (``le`` is inclusive; the last
    index, ``len(buckets)``, is ``+Inf``)."""
    return bisect.bisect_left(buckets, value)


def cumulative(hits: Iterable[int]) -> tuple[int, ...]:
    """Per-bucket hits → Prometheus' cumulative bucket counts."""
    counts, running = [], 0
    for hit in hits:
        running += hit
        counts.append(running)
    return tuple(counts)


def window_quantiles(
    recent: Iterable[tuple[float, float]], now: float
) -> dict[str, dict[float, float]]:
    """Window name → quantile → value over the ``(at, value)`` samples of each of
    :data:`QUANTILE_WINDOWS` before ``now`` (empty for a window without a sample)."""
    samples = list(recent)
    return {
        name: quantiles([v for t, v in samples if t >= now - span], DEFAULT_QUANTILES)
        for name, span in QUANTILE_WINDOWS.items()
    }


SKIPPED = "skipped"
""":attr:`LastError.outcome` of a canary that sends nothing: its model cannot be filled."""


@dataclass(frozen=True, slots=True)
class LastError:
    """The most recent failed request of a series: what a person asks first when the
    availability SLO burns ("failing how, and since when?"). Or, with the outcome
    :data:`SKIPPED`, why the canary sends nothing at all."""

    outcome: str
    error: str
    at: float
    """Monotonic seconds, as :attr:`CanaryResult.at`."""
    wall_time: float
    """Unix seconds when it was recorded, for display next to log timestamps."""
    age_seconds: float = 0.0
    """How long before the snapshot it happened (set by :meth:`CanaryBoard.snapshot`)."""


@dataclass(frozen=True, slots=True)
class SeriesSnapshot:
    target: str
    model: str
    protocol: str
    outcomes: dict[str, int]
    bucket_counts: tuple[int, ...]
    """Cumulative counts per bucket of the histogram, ``+Inf`` last."""
    latency_sum: float
    latency_count: int
    window_quantiles: dict[str, dict[float, float]]
    """window name → quantile → seconds (empty when the window holds no sample)."""
    last_error: LastError | None = None
    """The latest failure (any outcome but success), kept until a newer one."""
    send_lateness_sum: float = 0.0
    send_lateness_count: int = 0
    """How late the canary's own thread took its requests up, in total and how many
    (requests with a latency): the client's scheduling, kept out of the latency."""
    last_outcome_at: float | None = None
    """Monotonic seconds of the latest outcome of any kind (None: none yet): a canary
    that stops producing outcomes is stalled, whatever its last numbers said."""
    failing_since: float | None = None
    """When the current run of server failures began (None: the latest outcome that
    speaks for the server was a success, or there was none)."""
    failures_in_row: int = 0
    """How many server failures that run holds (outcomes in :data:`NOT_THE_SERVERS`
    neither extend nor end it)."""
    input_refused: str | None = None
    """While the model refuses the canary's input (its canary backed off after refusals
    in a row, probe/canary/refusals.py): Triton's latest refusal text; else None."""


class _Series:
    __slots__ = (
        "bucket_hits",
        "count",
        "failing_since",
        "failures_in_row",
        "last_error",
        "last_outcome_at",
        "late_count",
        "late_total",
        "outcomes",
        "recent",
        "total",
    )

    def __init__(self, buckets: int) -> None:
        self.outcomes: Counter[str] = Counter()
        self.bucket_hits = [0] * (buckets + 1)  # non-cumulative; the last is +Inf
        self.total = 0.0
        self.count = 0
        self.recent: deque[tuple[float, float]] = deque()
        self.last_error: LastError | None = None
        self.late_total = 0.0
        self.late_count = 0
        self.last_outcome_at: float | None = None
        self.failing_since: float | None = None
        self.failures_in_row = 0

    def note_outcome(self, outcome: Outcome, at: float) -> None:
        """Keeps the liveness record: when anything last came, and the run of failures."""
        self.last_outcome_at = at
        if outcome in NOT_THE_SERVERS:
            return
        if outcome == Outcome.SUCCESS:
            self.failing_since, self.failures_in_row = None, 0
            return
        if self.failing_since is None:
            self.failing_since = at
        self.failures_in_row += 1


class CanaryBoard:
    """Thread-safe accumulation of :class:`CanaryResult` s."""

    def __init__(
        self,
        buckets: Sequence[float] = DEFAULT_BUCKETS,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._lock = threading.Lock()
        self._wall_clock = wall_clock
        self._buckets = tuple(buckets)
        self._series: dict[SeriesKey, _Series] = {}
        self._protocols: dict[tuple[str, str], tuple[str, ...]] = {}
        """(target, model) → the protocols of its series: an index of ``_series``."""
        self._open_circuits: set[SeriesKey] = set()
        self._skipped: dict[SeriesKey, str] = {}
        self._unprepared: set[SeriesKey] = set()
        self._refused: dict[SeriesKey, str] = {}
        self._rates = (0.0, 0.0)
        """The canaries' total rate asked and planned (``canary.max_total_rate``)."""

    def set_rates(self, asked: float, planned: float) -> None:
        """The canaries' total requests per second before and after the fleet-wide budget
        (the runner's, at each apply)."""
        with self._lock:
            self._rates = (asked, planned)

    def rates(self) -> tuple[float, float]:
        """(asked, planned) requests per second over every canary."""
        with self._lock:
            return self._rates

    def set_input_refused(self, key: SeriesKey, error: str | None) -> None:
        """Records that a canary's requests are refused (``error``: the server's text)
        and it backs off, or (None) that one succeeded again."""
        with self._lock:
            if error is None:
                self._refused.pop(key, None)
            else:
                self._refused[key] = error

    def input_refused(self) -> dict[SeriesKey, str]:
        """The canaries whose input the model refuses, with the server's latest text."""
        with self._lock:
            return dict(self._refused)

    def set_circuit_open(self, key: SeriesKey, *, open_: bool) -> None:
        """Records whether a canary's circuit breaker holds its load back."""
        with self._lock:
            if open_:
                self._open_circuits.add(key)
            else:
                self._open_circuits.discard(key)

    def open_circuits(self) -> set[SeriesKey]:
        with self._lock:
            return set(self._open_circuits)

    def set_skipped(self, key: SeriesKey, reason: str | None, at: float = 0.0) -> None:
        """Records that a canary sends nothing and why (None: it runs after all). The
        reason is also the series' last error, so whatever shows last errors shows it."""
        with self._lock:
            series = self._series.get(key)
            if reason is None:
                self._skipped.pop(key, None)
                last = None if series is None else series.last_error
                if series is not None and last is not None and last.outcome == SKIPPED:
                    series.last_error = None
                return
            self._skipped[key] = reason
            if series is not None:
                series.last_error = LastError(SKIPPED, reason, at, self._wall_clock())

    def set_unprepared(self, key: SeriesKey, unprepared: bool) -> None:
        """Records that a canary could not read its model's metadata yet (it retries):
        it has tried, and the server's answer, not a missing request, is why it sends
        nothing."""
        with self._lock:
            if unprepared:
                self._unprepared.add(key)
            else:
                self._unprepared.discard(key)

    def unprepared(self) -> set[SeriesKey]:
        """The canaries still waiting for their model's metadata."""
        with self._lock:
            return set(self._unprepared)

    def skipped(self) -> dict[SeriesKey, str]:
        """The canaries that send nothing, with why."""
        with self._lock:
            return dict(self._skipped)

    @property
    def buckets(self) -> tuple[float, ...]:
        return self._buckets

    def set_buckets(self, buckets: Sequence[float]) -> None:
        """Changes the histogram layout (config reload); counts restart, as a new
        bucket set is a new histogram for Prometheus anyway."""
        with self._lock:
            if tuple(buckets) != self._buckets:
                self._buckets = tuple(buckets)
                self._series.clear()
                self._protocols.clear()

    def declare(self, keys: Iterable[SeriesKey]) -> None:
        """Keeps only ``keys`` (configured canaries), adding the new ones at zero."""
        wanted = set(keys)
        with self._lock:
            self._series = {k: v for k, v in self._series.items() if k in wanted}
            self._skipped = {k: v for k, v in self._skipped.items() if k in wanted}
            self._unprepared &= wanted
            self._refused = {k: v for k, v in self._refused.items() if k in wanted}
            for key in wanted - self._series.keys():
                self._series[key] = _Series(len(self._buckets))
            protocols: dict[tuple[str, str], tuple[str, ...]] = {}
            for target, model, protocol in sorted(self._series):
                protocols[(target, model)] = (*protocols.get((target, model), ()), protocol)
            self._protocols = protocols

    def record(self, result: CanaryResult) -> None:
        key = (result.target, result.model, result.protocol)
        with self._lock:
            series = self._series.get(key)
            if series is None:  # a canary removed by a reload finishing late
                return
            series.outcomes[result.outcome] += 1
            series.note_outcome(result.outcome, result.at)
            if result.outcome != Outcome.SUCCESS:
                series.last_error = LastError(
                    str(result.outcome), result.error, result.at, self._wall_clock()
                )
            latency = result.latency_seconds
            if latency is None:
                return
            series.bucket_hits[bucket_index(self._buckets, latency)] += 1
            series.total += latency
            series.count += 1
            if result.send_lateness_seconds is not None:
                series.late_total += result.send_lateness_seconds
                series.late_count += 1
            series.recent.append((result.at, latency))
            while series.recent and series.recent[0][0] < result.at - _LONGEST_WINDOW:
                series.recent.popleft()

    def samples_between(self, target: str, model: str, start: float, end: float) -> list[float]:
        """Latencies the model's canary (any protocol) measured in [start, end) — as far
        back as the longest quantile window; for before/after comparisons."""
        with self._lock:
            return [
                latency
                for protocol in self._protocols.get((target, model), ())
                if (series := self._series.get((target, model, protocol))) is not None
                for at, latency in series.recent
                if start <= at < end
            ]

    def snapshot(self, now: float, *, quantiles: bool = True) -> list[SeriesSnapshot]:
        """Every series as of monotonic time ``now``, sorted by key. ``quantiles`` False
        leaves ``window_quantiles`` empty, for readers of the counts only (a thousand
        series' windows cost a third of a scrape)."""
        with self._lock:
            raw = [
                (
                    key,
                    dict(s.outcomes),
                    list(s.bucket_hits),
                    s.total,
                    s.count,
                    list(s.recent) if quantiles else [],
                    s.last_error,
                    (
                        s.late_total,
                        s.late_count,
                        s.last_outcome_at,
                        s.failing_since,
                        s.failures_in_row,
                        self._refused.get(key),
                    ),
                )
                for key, s in sorted(self._series.items())
            ]
        snapshots = []
        for (target, model, protocol), outcomes, hits, total, count, recent, last, late in raw:
            for outcome in Outcome:
                outcomes.setdefault(str(outcome), 0)
            aged = None if last is None else replace(last, age_seconds=max(0.0, now - last.at))
            snapshots.append(
                SeriesSnapshot(
                    target,
                    model,
                    protocol,
                    outcomes,
                    cumulative(hits),
                    total,
                    count,
                    window_quantiles(recent, now) if quantiles else {},
                    aged,
                    *late,
                )
            )
        return snapshots
