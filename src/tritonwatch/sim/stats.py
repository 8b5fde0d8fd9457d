"""Cumulative request accounting, as Triton keeps it for the statistics API and /metrics.

Triton keeps two views of the same events, and they reset differently:

* the statistics API (``GET v2/models/{m}/stats``) lives with the loaded model object,
  so a reload that replaces the model starts it again from zero;
* ``/metrics`` series live in the metrics registry under their labels, so they survive
  a reload (the new model finds the same series) and vanish on unload.

``Ledger`` is one such set of counters; the repository keeps one per loaded model (stats)
and one per label set (metrics). ``SummaryWindow`` is the sliding 60 s quantile window
of the optional summary families.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tritonwatch.sim.llm_counters import LlmCounters

FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
"""The ``reason`` label values of ``nv_inference_request_failure`` (Triton 24.07+)."""
SUMMARY_QUANTILES = (0.5, 0.9, 0.95, 0.99, 0.999)
SUMMARY_WINDOW_S = 60.0
STAGES = ("request", "queue", "compute_input", "compute_infer", "compute_output")
CACHE_OUTCOMES = ("cache_hit", "cache_miss")
"""The per-model response-cache counters (``nv_cache_num_{hits,misses}_per_model`` and
their durations; the statistics API's ``cache_hit``/``cache_miss``)."""


@dataclass(slots=True)
class RequestTimes:
    """Nanosecond durations of one completed request."""

    request_ns: int
    queue_ns: int
    compute_input_ns: int
    compute_infer_ns: int
    compute_output_ns: int

    def by_stage(self) -> tuple[int, int, int, int, int]:
        """Durations in the order of ``STAGES``."""
        return (
            self.request_ns,
            self.queue_ns,
            self.compute_input_ns,
            self.compute_infer_ns,
            self.compute_output_ns,
        )


@dataclass(slots=True)
class _Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int) -> None:
        self.count += 1
        self.ns += ns

    def as_json(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass(slots=True)
class _BatchStat:
    compute_input: _Duration = field(default_factory=_Duration)
    compute_infer: _Duration = field(default_factory=_Duration)
    compute_output: _Duration = field(default_factory=_Duration)


@dataclass
class Ledger:
    """Cumulative counters of one model: successes, failures, executions, durations.

    Nanosecond sums feed the statistics API; microsecond sums (each request rounded
    down, as Triton does) feed the ``*_duration_us`` counters, so a summary's ``_sum``
    equals its counter exactly.
    """

    success: _Duration = field(default_factory=_Duration)
    fail: _Duration = field(default_factory=_Duration)
    queue: _Duration = field(default_factory=_Duration)
    compute_input: _Duration = field(default_factory=_Duration)
    compute_infer: _Duration = field(default_factory=_Duration)
    compute_output: _Duration = field(default_factory=_Duration)
    failures_by_reason: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(FAILURE_REASONS, 0)
    )
    microseconds: list[int] = field(default_factory=lambda: [0] * len(STAGES))
    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0
    batches: dict[int, _BatchStat] = field(default_factory=dict)
    cache_hit: _Duration = field(default_factory=_Duration)
    cache_miss: _Duration = field(default_factory=_Duration)
    cache_microseconds: list[int] = field(default_factory=lambda: [0, 0])
    """Microsecond sums of hit and miss durations, each rounded down as Triton does."""

    def record_success(self, times: RequestTimes) -> None:
        """Counts one successful request (call after its response is complete)."""
        self.success.add(times.request_ns)
        self.queue.add(times.queue_ns)
        self.compute_input.add(times.compute_input_ns)
        self.compute_infer.add(times.compute_infer_ns)
        self.compute_output.add(times.compute_output_ns)
        for index, ns in enumerate(times.by_stage()):
            self.microseconds[index] += ns // 1000
        self.last_inference_ms = int(time.time() * 1000)

    def record_cache_hit(self, request_ns: int, queue_ns: int, lookup_ns: int) -> None:
        """Counts a request answered from the response cache, as Triton 2.51 does: a
        success with its request and queue durations, no execution, no compute, no
        inference (``nv_inference_count`` excludes cached requests)."""
        self.success.add(request_ns)
        self.queue.add(queue_ns)
        self.microseconds[0] += request_ns // 1000
        self.microseconds[1] += queue_ns // 1000
        self.cache_hit.add(lookup_ns)
        self.cache_microseconds[0] += lookup_ns // 1000
        self.last_inference_ms = int(time.time() * 1000)

    def record_cache_miss(self, miss_ns: int) -> None:
        """Counts a miss (lookup plus insertion, after the request succeeded): Triton adds
        that time to the request's duration too."""
        self.success.ns += miss_ns
        self.microseconds[0] += miss_ns // 1000
        self.cache_miss.add(miss_ns)
        self.cache_microseconds[1] += miss_ns // 1000

    def record_failure(self, reason: str, duration_ns: int) -> None:
        """Counts one failed request with its ``reason`` label."""
        self.fail.add(duration_ns)
        self.failures_by_reason[reason] += 1
        self.last_inference_ms = int(time.time() * 1000)

    def record_execution(
        self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int
    ) -> None:
        """Counts one model execution of ``batch_size`` inferences."""
        self.inference_count += batch_size
        self.execution_count += 1
        stat = self.batches.get(batch_size)
        if stat is None:
            stat = self.batches[batch_size] = _BatchStat()
        stat.compute_input.add(input_ns)
        stat.compute_infer.add(infer_ns)
        stat.compute_output.add(output_ns)

    def stats_json(self, name: str, version: str) -> dict[str, Any]:
        """One ``model_stats`` entry of the statistics extension."""
        return {
            "name": name,
            "version": version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.as_json(),
                "fail": self.fail.as_json(),
                "queue": self.queue.as_json(),
                "compute_input": self.compute_input.as_json(),
                "compute_infer": self.compute_infer.as_json(),
                "compute_output": self.compute_output.as_json(),
                "cache_hit": self.cache_hit.as_json(),
                "cache_miss": self.cache_miss.as_json(),
            },
            "response_stats": {},
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": stat.compute_input.as_json(),
                    "compute_infer": stat.compute_infer.as_json(),
                    "compute_output": stat.compute_output.as_json(),
                }
                for size, stat in sorted(self.batches.items())
            ],
            "memory_usage": [],
        }


class SummaryWindow:
    """Quantiles over the last 60 s of observations; ``_count``/``_sum`` are cumulative.

    Keeps at most ``max_samples`` of the newest observations, so a scrape at thousands
    of requests per second sorts a bounded array (the quantiles then describe the most
    recent part of the window, which is what a 60 s window at that rate shows anyway).
    """

    def __init__(self, window_s: float = SUMMARY_WINDOW_S, max_samples: int = 65_536) -> None:
        self._window_s = window_s
        self._times: deque[float] = deque(maxlen=max_samples)
        self._values: deque[int] = deque(maxlen=max_samples)
        self.count = 0
        self.total = 0

    def observe(self, now: float, value: int) -> None:
        """Adds one observation made at loop time ``now``."""
        self._times.append(now)
        self._values.append(value)
        self.count += 1
        self.total += value
        self._expire(now)

    def _expire(self, now: float) -> None:
        horizon = now - self._window_s
        while self._times and self._times[0] < horizon:
            self._times.popleft()
            self._values.popleft()

    def quantiles(self, now: float) -> list[tuple[float, float]]:
        """(quantile, value) for Triton's five quantiles; NaN when the window is empty."""
        self._expire(now)
        values = np.sort(np.fromiter(self._values, dtype=np.int64, count=len(self._values)))
        return [(q, _nearest_rank(values, q)) for q in SUMMARY_QUANTILES]


class ModelSeries:
    """The /metrics state of one (model, version): counters, summaries, ground truth."""

    def __init__(self, name: str, version: str, *, ground_truth_limit: int = 200_000) -> None:
        self.name = name
        self.version = version
        self.ledger = Ledger()
        self.summaries = {stage: SummaryWindow() for stage in (*STAGES, *CACHE_OUTCOMES)}
        self.pending = 0
        self.llm = LlmCounters()
        """Token, preemption and latency counts of an LLM model (unused otherwise)."""
        self._ground_truth: deque[float] = deque(maxlen=ground_truth_limit)

    def record_success(
        self, now: float, times: RequestTimes, *, with_summaries: bool, cached: bool = False
    ) -> None:
        """Counts a success in the counters, the summaries and the ground truth.

        ``cached``: the model has its response cache enabled; Triton 2.51 then observes
        no request summary for it (its FIXME DLIS-4762), so the series stays absent."""
        self.ledger.record_success(times)
        if with_summaries:
            for stage, ns in zip(STAGES, times.by_stage(), strict=True):
                if not (cached and stage == "request"):
                    self.summaries[stage].observe(now, ns // 1000)
        self._ground_truth.append(times.request_ns / 1e9)

    def record_cache_hit(
        self, now: float, request_ns: int, queue_ns: int, lookup_ns: int, *, with_summaries: bool
    ) -> None:
        """Counts a cache hit (see ``Ledger.record_cache_hit``) in the counters, the queue
        and cache-hit summaries and the ground truth."""
        self.ledger.record_cache_hit(request_ns, queue_ns, lookup_ns)
        if with_summaries:
            self.summaries["queue"].observe(now, queue_ns // 1000)
            self.summaries["cache_hit"].observe(now, lookup_ns // 1000)
        self._ground_truth.append(request_ns / 1e9)

    def record_cache_miss(self, now: float, miss_ns: int, *, with_summaries: bool) -> None:
        """Counts a cache miss's lookup and insertion time."""
        self.ledger.record_cache_miss(miss_ns)
        if with_summaries:
            self.summaries["cache_miss"].observe(now, miss_ns // 1000)

    def latency_samples(self) -> list[float]:
        """True server-side request durations in seconds, oldest first."""
        return list(self._ground_truth)

    def reset(self) -> None:
        """Back to zero, as after a server restart."""
        self.ledger = Ledger()
        self.summaries = {stage: SummaryWindow() for stage in (*STAGES, *CACHE_OUTCOMES)}
        self.llm.reset()
        self._ground_truth.clear()


def _nearest_rank(ordered: Sequence[float] | npt.NDArray[np.int64], quantile: float) -> float:
    if len(ordered) == 0:
        return math.nan
    rank = max(0, min(len(ordered) - 1, math.ceil(quantile * len(ordered)) - 1))
    return float(ordered[rank])


def percentile(samples: list[float], quantile: float) -> float:
    """Nearest-rank percentile of ``samples`` (NaN when empty), for ground-truth checks."""
    return _nearest_rank(sorted(samples), quantile)
