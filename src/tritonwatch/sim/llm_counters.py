"""What an LLM model has counted since the server started: tokens, preemptions, latencies.

These live with the model's ``/metrics`` series (``stats.ModelSeries``), not with the
engine, so they survive a reload and reset on a simulated restart, as Triton's metric
registry and vLLM's Prometheus counters behave. Gauges (running, waiting, KV blocks in
use) are read live from the engine instead.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

VLLM_TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip  # bounds in rows as vllm v1/metrics/loggers.py lists them, to compare by eye
"""``vllm:time_to_first_token_seconds`` (vllm ``v1/metrics/loggers.py``)."""
VLLM_ITL_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip  # bounds in rows as vllm v1/metrics/loggers.py lists them, to compare by eye
"""``vllm:inter_token_latency_seconds``."""
VLLM_E2E_BUCKETS_S = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip  # bounds in rows as vllm v1/metrics/loggers.py lists them, to compare by eye
"""``vllm:e2e_request_latency_seconds``."""
FIRST_RESPONSE_BUCKETS_MS = (100.0, 500.0, 2000.0, 5000.0)
"""Triton's default buckets of ``nv_inference_first_response_histogram_ms``."""


@dataclass
class Histogram:
    """A cumulative Prometheus histogram: per-bucket hits (not yet cumulated), sum, count."""

    bounds: Sequence[float]
    hits: list[int] = field(init=False)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.hits = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        """Counts ``value`` in the first bucket whose upper bound is ≥ it."""
        self.hits[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, cumulative count)`` per bucket, ``inf`` last."""
        rows, running = [], 0
        for bound, hits in zip((*self.bounds, float("inf")), self.hits, strict=True):
            running += hits
            rows.append((bound, running))
        return rows


@dataclass
class LlmCounters:
    """Cumulative counts of one LLM model (see the module docstring)."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    finished: int = 0
    steps: int = 0
    ttft_s: Histogram = field(default_factory=lambda: Histogram(VLLM_TTFT_BUCKETS_S))
    itl_s: Histogram = field(default_factory=lambda: Histogram(VLLM_ITL_BUCKETS_S))
    e2e_s: Histogram = field(default_factory=lambda: Histogram(VLLM_E2E_BUCKETS_S))
    first_response_ms: Histogram = field(
        default_factory=lambda: Histogram(FIRST_RESPONSE_BUCKETS_MS)
    )

    def reset(self) -> None:
        """Back to zero in place (a simulated restart), so the engine keeps its reference."""
        fresh = LlmCounters()
        for item in fields(self):
            setattr(self, item.name, getattr(fresh, item.name))
