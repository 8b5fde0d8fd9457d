"""What a sweep measured and concluded: the records its runner, judge and reports share.

:class:`SweepSteps` is what :class:`~tritonwatch.sweep.load_sweep.SweepRunner` measured;
:class:`SweepResult` adds the judgement's knee and operating point
(:func:`~tritonwatch.analysis.sweep_verdict.judge_sweep`), and is what the reports,
the exporter and the tuner read.

A streaming sweep (a decoupled model, or an OpenAI-compatible server:
:class:`~tritonwatch.sweep.stream_sweep.StreamSweepRunner`) fills the same records plus
each step's TTFT, ITL and output tokens/s, and is judged on ``settings.measure`` with
output tokens/s as its throughput.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from tritonwatch.common.client_tls import ClientTLS
from tritonwatch.config.canary_schema import DEFAULT_STRING_LENGTH, InputOverride, StreamConfig

LoadMode = Literal["concurrency", "rate"]
"""A sweep's levels are concurrencies (closed loop) or request rates (open loop)."""
Arrivals = Literal["constant", "poisson"]
"""How an open loop spaces its requests: evenly, or as Poisson arrivals."""
MAX_WINDOWS = 10
"""perf_analyzer's default: a step that has not settled after 10 windows is unstable."""
SERVER_STAGES = ("queue", "compute_input", "compute_infer", "compute_output")
"""Triton's statistics API stages a step's server breakdown reports."""
SweepProtocol = Literal["http", "grpc", "openai"]
"""``openai`` only streams (an OpenAI-compatible server has no KServe v2 API)."""
Measure = Literal["latency", "ttft", "itl"]
"""What a sweep's stability, budget and operating point are judged on: the whole
request's latency (a plain sweep), or a streaming sweep's time to first token or
inter-token latency (every gap between content-bearing responses, docs/design.md §5)."""
MEASURE_NAMES: dict[Measure, str] = {"latency": "latency", "ttft": "TTFT", "itl": "ITL"}


@dataclass(frozen=True, slots=True)
class CurvePoint:
    concurrency: float
    throughput: float
    """Inferences per second (a streaming sweep: output tokens per second)."""
    p95_seconds: float
    """The p95 of the sweep's measure (latency, TTFT or ITL)."""


@dataclass(frozen=True, slots=True)
class Knee:
    concurrency: float
    throughput: float
    reached: bool
    """False when throughput was still growing at the last point measured."""


@dataclass(frozen=True, slots=True)
class ServerBreakdown:
    """Per-request averages (seconds) over one step."""

    requests: int
    request_seconds: float
    stage_seconds: dict[str, float]
    batch_size_average: float | None


@dataclass(frozen=True, slots=True)
class SweepSettings:
    url: str
    model: str
    levels: tuple[float, ...]
    """Concurrencies (``mode="concurrency"``) or request rates per second (``"rate"``)."""
    protocol: SweepProtocol = "http"
    version: str = ""
    mode: LoadMode = "concurrency"
    budget_p95: float | None = None
    """The p95 of :attr:`measure` past which the sweep stops (seconds)."""
    measure: Measure = "latency"
    percentile: float = 95.0
    window_seconds: float = 5.0
    window_requests: int | None = None
    max_windows: int = MAX_WINDOWS
    max_processes: int = field(default_factory=lambda: os.cpu_count() or 1)
    timeout: float = 30.0
    rate_in_flight: int = 256
    """In rate mode: how many requests may be outstanding at once."""
    arrivals: Arrivals = "constant"
    """In rate mode: evenly spaced requests, or Poisson arrivals (bursty, as independent
    users send: perf_analyzer's ``--request-distribution``)."""
    inputs: dict[str, InputOverride] = field(default_factory=dict)
    data: Literal["random", "zero"] = "random"
    string_length: int = DEFAULT_STRING_LENGTH
    string_data: str | None = None
    """BYTES inputs: random strings of ``string_length``, or this in every element
    (perf_analyzer's ``--string-length`` and ``--string-data``)."""
    tls: ClientTLS | None = None
    """CA and client certificate for ``https://``/``grpcs://`` URLs."""
    stream: StreamConfig = field(default_factory=StreamConfig)
    """A streaming sweep's prompts, token counts, field names and OpenAI API; its
    ``timeout`` is not used (``timeout`` above bounds each stream)."""
    served_name: str | None = None
    """The OpenAI ``model`` field, when the server knows the model by another name."""

    def past_budget(self, p95: float) -> bool:
        """Whether a step's p95 ends the sweep (searching up to the budget, as
        perf_analyzer's ``--latency-threshold`` does); the sweep's one stopping rule."""
        return self.budget_p95 is not None and p95 > self.budget_p95


@dataclass(frozen=True, slots=True)
class StepResult:
    level: float
    requests_per_second: float
    inferences_per_second: float
    latency: dict[str, float]
    """p50, p90, p95, p99, the chosen percentile as ``pNN``, and ``avg`` (seconds)."""
    requests: int
    errors: int
    error_rate: float
    stable: bool
    windows: int
    processes: int
    client_cpu_per_request: float
    client_latency_share: float
    generator_utilisation: float
    generator_bound: bool
    server: ServerBreakdown | None
    gpu_utilization: float | None = None
    """The model's GPU utilisation at the end of the step, when a probe was given."""
    window_throughputs: tuple[float, ...] = ()
    """Inferences/s (a streaming step: output tokens/s) of each window the step's
    numbers come from (for comparisons)."""
    latency_samples: tuple[float, ...] = field(default=(), repr=False)
    """Every request latency of those windows (for bootstrap comparisons; not in JSON)."""
    ttft: dict[str, float] | None = None
    """A streaming step's time to first token, keyed as :attr:`latency` (seconds)."""
    itl: dict[str, float] | None = None
    """A streaming step's inter-token latency over every gap, keyed as :attr:`latency`."""
    itl_per_request: dict[str, float] | None = None
    """genai-perf's ITL (vLLM's TPOT): one ``(last - first) / (tokens - 1)`` per stream."""
    output_tokens_per_second: float | None = None
    """A streaming step's output tokens per second (the server's count where it gives one)."""

    @property
    def p95(self) -> float:
        return self.latency["p95"]

    @property
    def streaming(self) -> bool:
        return self.output_tokens_per_second is not None

    @property
    def throughput(self) -> float:
        """What the knee is found on: output tokens/s when streaming, else inferences/s."""
        tokens = self.output_tokens_per_second
        return self.inferences_per_second if tokens is None else tokens

    def quantiles(self, measure: Measure) -> dict[str, float]:
        """The step's quantiles of ``measure``.

        Raises:
            ValueError: TTFT or ITL of a step that did not stream.
        """
        values = {"latency": self.latency, "ttft": self.ttft, "itl": self.itl}[measure]
        if values is None:
            raise ValueError(f"a step that did not stream has no {MEASURE_NAMES[measure]}")
        return values


@dataclass(frozen=True, slots=True)
class SweepSteps:
    """What one sweep measured: every step in order, and why it ended."""

    settings: SweepSettings
    steps: tuple[StepResult, ...]
    stopped_at_budget: bool
    warnings: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SweepResult:
    settings: SweepSettings
    steps: tuple[StepResult, ...]
    knee: Knee | None
    operating_point: StepResult | None
    stopped_at_budget: bool
    warnings: tuple[str, ...]
    open_loop: tuple[StepResult, ...] = ()
    """The open-loop check's request-rate steps, highest rate first (a scheduled sweep's
    capacity check, :func:`~tritonwatch.analysis.capacity.open_loop_rates`)."""
    open_loop_checked: bool = False
    """Whether the check ran (``capacity.open_loop_check`` and a closed-loop capacity)."""


class SweepBoard:
    """The latest result per (target, model); thread-safe; pruned to configured models."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._results: dict[tuple[str, str], tuple[SweepResult, float]] = {}

    def declare(self, keys: Iterable[tuple[str, str]]) -> None:
        wanted = set(keys)
        with self._lock:
            self._results = {k: v for k, v in self._results.items() if k in wanted}

    def record(self, key: tuple[str, str], result: SweepResult, finished_at: float) -> None:
        with self._lock:
            self._results[key] = (result, finished_at)

    def snapshot(self) -> dict[tuple[str, str], tuple[SweepResult, float]]:
        with self._lock:
            return dict(self._results)
