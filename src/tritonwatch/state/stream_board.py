"""What the streaming canary measured, per (target, model, protocol): time to first token,
inter-token gaps and output tokens, ready for export and the TTFT/ITL SLOs.

The twin of :mod:`tritonwatch.state.canary_board` (same locking, bucket and window helpers):
written from the canary's thread, read at scrape time from the exporter's threads, every
access under one lock, readers get immutable snapshots. A stream's request outcome and
whole-stream latency go to :class:`~tritonwatch.state.canary_board.CanaryBoard` through
:meth:`~tritonwatch.records.observations.StreamResult.as_canary_result`; only what is new for
streams lives here.

Only successful streams feed the histograms and windows, the rule latency follows: a
stream cut off by an error says nothing reliable about its tokens' pace. Output tokens
count every stream, failed ones included, since the server did send them.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tritonwatch.records.observations import Outcome, StreamResult
from tritonwatch.state.canary_board import (
    DEFAULT_BUCKETS,
    QUANTILE_WINDOWS,
    SeriesKey,
    bucket_index,
    cumulative,
    window_quantiles,
)

TTFT_DEFAULT_BUCKETS = DEFAULT_BUCKETS
"""First tokens take as long as short requests (ms) to long prefills (seconds)."""
ITL_DEFAULT_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0,
)  # fmt: skip  # bounds in one row, read as a scale rather than one per line
"""Gaps between tokens: a decode step is milliseconds to tens of milliseconds, finer
than the latency defaults near the usual 50 ms ITL objective."""
MEASURES = ("ttft", "itl")
TTFT_WINDOW_CAP = 20_000
"""First tokens kept for the quantile windows per series: above the 5 minutes at the
per-target rate cap (50/s) the canary can reach."""
GAP_WINDOW_CAP = 200_000
"""Gaps kept per series: 1 stream/s × 5 min × several hundred tokens fits; a busier
series loses its oldest gaps from the windows, so memory stays bounded."""
_LONGEST_WINDOW = max(QUANTILE_WINDOWS.values())


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """One histogram of one series: cumulative bucket counts (``+Inf`` last), sum, count."""

    bucket_counts: tuple[int, ...]
    sum: float
    count: int


@dataclass(frozen=True, slots=True)
class StreamSnapshot:
    target: str
    model: str
    protocol: str
    ttft: HistogramSnapshot
    itl: HistogramSnapshot
    """One observation per gap between content-bearing responses."""
    output_tokens: int
    """Tokens received over every stream since the series began."""
    window_quantiles: dict[str, dict[str, dict[float, float]]]
    """measure (``ttft``/``itl``) → window name → quantile → seconds (empty when the
    window holds no sample)."""
    output_tokens_per_second: dict[str, float] = field(default_factory=dict)
    """window name → tokens of the streams that ended in the window over the time the
    window covers (from the first stream's start when the series is younger than the
    window); a window without a stream is left out."""


class _Histogram:
    """Bucket hits, sum and count of one measure, and its recent ``(at, value)`` samples."""

    __slots__ = ("count", "hits", "recent", "total")

    def __init__(self, buckets: int, cap: int) -> None:
        self.hits = [0] * (buckets + 1)  # non-cumulative; the last is +Inf
        self.total = 0.0
        self.count = 0
        self.recent: deque[tuple[float, float]] = deque(maxlen=cap)

    def observe(self, buckets: Sequence[float], at: float, value: float) -> None:
        self.hits[bucket_index(buckets, value)] += 1
        self.total += value
        self.count += 1
        self.recent.append((at, value))

    def prune(self, now: float) -> None:
        while self.recent and self.recent[0][0] < now - _LONGEST_WINDOW:
            self.recent.popleft()

    def copy(self) -> tuple[HistogramSnapshot, list[tuple[float, float]]]:
        return HistogramSnapshot(cumulative(self.hits), self.total, self.count), list(self.recent)


class _Series:
    __slots__ = ("first_start", "itl", "output_tokens", "recent_tokens", "ttft")

    def __init__(self, ttft_buckets: int, itl_buckets: int) -> None:
        self.ttft = _Histogram(ttft_buckets, TTFT_WINDOW_CAP)
        self.itl = _Histogram(itl_buckets, GAP_WINDOW_CAP)
        self.output_tokens = 0
        self.recent_tokens: deque[tuple[float, int]] = deque(maxlen=TTFT_WINDOW_CAP)
        """``(at, tokens)`` of every stream, failed ones too, for the token rate."""
        self.first_start: float | None = None
        """When the series' first stream was sent: a younger series' rate covers only
        the time since, not the whole window."""

    def add_tokens(self, result: StreamResult) -> None:
        self.output_tokens += result.output_tokens
        if self.first_start is None:
            self.first_start = result.at - (result.total_seconds or 0.0)
        self.recent_tokens.append((result.at, result.output_tokens))
        while self.recent_tokens and self.recent_tokens[0][0] < result.at - _LONGEST_WINDOW:
            self.recent_tokens.popleft()

    def token_rates(self, now: float) -> dict[str, float]:
        """Window name → output tokens per second (see
        :attr:`StreamSnapshot.output_tokens_per_second`)."""
        if self.first_start is None:
            return {}
        rates = {}
        for name, span in QUANTILE_WINDOWS.items():
            covered = min(span, now - self.first_start)
            ended = [tokens for at, tokens in self.recent_tokens if at >= now - span]
            if ended and covered > 0:
                rates[name] = sum(ended) / covered
        return rates


class StreamBoard:
    """Thread-safe accumulation of :class:`~tritonwatch.records.observations.StreamResult` s."""

    def __init__(
        self,
        ttft_buckets: Sequence[float] = TTFT_DEFAULT_BUCKETS,
        itl_buckets: Sequence[float] = ITL_DEFAULT_BUCKETS,
    ) -> None:
        self._lock = threading.Lock()
        self._ttft_buckets = tuple(ttft_buckets)
        self._itl_buckets = tuple(itl_buckets)
        self._series: dict[SeriesKey, _Series] = {}

    @property
    def ttft_buckets(self) -> tuple[float, ...]:
        return self._ttft_buckets

    @property
    def itl_buckets(self) -> tuple[float, ...]:
        return self._itl_buckets

    def set_buckets(self, *, ttft: Sequence[float], itl: Sequence[float]) -> None:
        """Changes the histogram layouts (config reload); counts restart, as a new bucket
        set is a new histogram for Prometheus anyway (as :meth:`CanaryBoard.set_buckets`)."""
        with self._lock:
            if (tuple(ttft), tuple(itl)) != (self._ttft_buckets, self._itl_buckets):
                self._ttft_buckets, self._itl_buckets = tuple(ttft), tuple(itl)
                self._series.clear()

    def declare(self, keys: Iterable[SeriesKey]) -> None:
        """Keeps only ``keys`` (streaming canaries), adding the new ones at zero."""
        wanted = set(keys)
        with self._lock:
            self._series = {k: v for k, v in self._series.items() if k in wanted}
            for key in wanted - self._series.keys():
                self._series[key] = _Series(len(self._ttft_buckets), len(self._itl_buckets))

    def record(self, result: StreamResult) -> None:
        key = (result.target, result.model, result.protocol)
        with self._lock:
            series = self._series.get(key)
            if series is None:  # a canary removed by a reload finishing late
                return
            series.add_tokens(result)
            if result.outcome != Outcome.SUCCESS:
                return
            if result.ttft_seconds is not None:
                series.ttft.observe(self._ttft_buckets, result.at, result.ttft_seconds)
            for gap in result.gaps_seconds:
                series.itl.observe(self._itl_buckets, result.at, gap)
            series.ttft.prune(result.at)
            series.itl.prune(result.at)

    def snapshot(self, now: float) -> list[StreamSnapshot]:
        """Every series as of monotonic time ``now``, sorted by key."""
        with self._lock:
            raw = [
                (key, s.ttft.copy(), s.itl.copy(), s.output_tokens, s.token_rates(now))
                for key, s in sorted(self._series.items())
            ]
        return [
            StreamSnapshot(
                target,
                model,
                protocol,
                ttft,
                itl,
                tokens,
                {
                    "ttft": window_quantiles(ttft_recent, now),
                    "itl": window_quantiles(itl_recent, now),
                },
                rates,
            )
            for (target, model, protocol), (ttft, ttft_recent), (
                itl,
                itl_recent,
            ), tokens, rates in raw
        ]
