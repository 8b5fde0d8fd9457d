"""What one target's scrapes produced: the records the exporter and the advisor read.

Immutable, so the scraper publishes a new :class:`TargetState` after each cycle by
swapping one reference, and readers on other threads never see half a cycle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal, TypeVar

from tritonwatch.records.llm_records import LlmRates, LlmReadings
from tritonwatch.records.observations import (
    BatchStatisticsRates,
    CacheRates,
    ModelConfigSnapshot,
    ModelRates,
    TritonGpuRates,
    TritonRates,
    TritonSummary,
)

STAGES = (
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "server_other",
    "network_client",
)
"""The ``stage`` label values of ``tritonwatch_model_latency_breakdown_seconds``."""

BottleneckKind = Literal["queue-bound", "compute-bound", "io-bound", "network-bound", "balanced"]

BOTTLENECK_KINDS: tuple[BottleneckKind, ...] = (
    "queue-bound",
    "compute-bound",
    "io-bound",
    "network-bound",
    "balanced",
)
"""The ``kind`` label values of ``tritonwatch_model_bottleneck``, in tie-break order."""


@dataclass(frozen=True, slots=True)
class LatencyBreakdown:
    """Mean seconds per request in each stage over one window (see the module docstring).

    ``server_seconds`` is Triton's mean request time and ``end_to_end_seconds`` the
    canary's mean, None without canary data.
    """

    queue: float
    compute_input: float
    compute_infer: float
    compute_output: float
    server_other: float
    network_client: float | None
    server_seconds: float
    end_to_end_seconds: float | None

    def stages(self) -> dict[str, float]:
        """Stage → seconds, in :data:`STAGES` order; ``network_client`` only when known."""
        values = {stage: getattr(self, stage) for stage in STAGES}
        return {stage: value for stage, value in values.items() if value is not None}


@dataclass(frozen=True, slots=True)
class Bottleneck:
    """The finding: what limits the model's latency, and the shares that show it.

    ``shares`` maps each stage of the breakdown to its share of the total (they add up
    to 1); ``reason`` says in one sentence why this kind was chosen.
    """

    kind: BottleneckKind
    shares: Mapping[str, float]
    reason: str
    step: str = ""
    """The composing model the bottleneck is in (an ensemble's step, a BLS model's child),
    "" when it is the model's own. For a pipeline the kind and reason come from its
    :class:`StepBreakdown`, ``shares`` stay its own breakdown's."""


PipelineKind = Literal["ensemble", "bls"]

STEP_STAGES = ("queue", "compute_input", "compute_infer", "compute_output", "other")
"""The ``stage`` values of a step in ``tritonwatch_model_step_latency_seconds``; the
pipeline's own remainder is the stage ``own`` (and its own queue ``queue``) of the step
named as the pipeline itself."""


@dataclass(frozen=True, slots=True)
class StepTime:
    """One composing model's time per request of the pipeline (seconds).

    Each stage is the step's own per-request average (over every caller of the step:
    Triton cannot tell callers apart) times ``calls``, the step's requests per pipeline
    request. ``other`` is the step's request time outside its four stage timers.
    """

    step: str
    calls: float
    calls_estimated: bool
    """``calls`` is inferred from request rates with other callers of the step about
    (see :mod:`tritonwatch.analysis.pipeline_shape`), not known from a config."""
    queue: float
    compute_input: float
    compute_infer: float
    compute_output: float
    other: float

    @property
    def compute(self) -> float:
        return self.compute_input + self.compute_infer + self.compute_output

    @property
    def total(self) -> float:
        return self.queue + self.compute + self.other

    def stages(self) -> dict[str, float]:
        """Stage → seconds, in :data:`STEP_STAGES` order."""
        return {stage: getattr(self, stage) for stage in STEP_STAGES}


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """Where a pipeline's request time goes, step by step
    (:func:`~tritonwatch.analysis.pipeline_breakdown.step_breakdown`).

    ``request_seconds`` is the pipeline's own mean request time; ``queue`` its own queue
    (about 0 for an ensemble); ``own`` what is left of the request after its queue and
    its steps (an ensemble's hand-offs, a BLS model's own Python), clamped at 0.
    ``parallel`` says the steps add up to more than the request: branches ran side by
    side, so the steps' times must not be summed. ``missing`` names the steps without
    readings in the window (no request completed there, or the page lacks them).
    """

    kind: PipelineKind
    steps: tuple[StepTime, ...]
    request_seconds: float
    queue: float
    own: float
    parallel: bool
    missing: tuple[str, ...] = ()

    def step(self, name: str) -> StepTime | None:
        return next((s for s in self.steps if s.step == name), None)


class FetchStatus(StrEnum):
    """How a fetch (or a gRPC read of the statistics or config API) ended; also logged
    as ``outcome`` and exported as the failures' ``outcome`` label."""

    SUCCESS = "success"
    TIMEOUT = "timeout"
    CONNECTION_ERROR = "connection_error"
    HTTP_ERROR = "http_error"
    GRPC_ERROR = "grpc_error"
    """The server answered a gRPC call with an error status (the canary's word too)."""
    TOO_LARGE = "too_large"
    BAD_RESPONSE = "bad_response"


class ScrapeSource(StrEnum):
    """What was scraped; the ``source`` label of the self-monitoring metrics."""

    METRICS = "metrics"
    STATS = "stats"
    CONFIG = "config"


@dataclass(frozen=True, slots=True)
class SourceOutcome:
    """How one source's requests of one cycle ended (all models' requests, for the
    statistics and config APIs: the first failure wins, durations add up)."""

    source: ScrapeSource
    status: FetchStatus
    duration_seconds: float
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is FetchStatus.SUCCESS


@dataclass(frozen=True, slots=True)
class ScrapeOutcome:
    """The result of :meth:`TargetScraper.scrape_once`; never an exception.

    ``sources`` holds the sources attempted in this cycle (the config API is polled
    only every few cycles, and an API the server lacks is not asked). ``rates`` is None
    on the first successful scrape and after a failed one.
    """

    target: str
    at: float
    sources: Mapping[ScrapeSource, SourceOutcome]
    bad_lines: int
    rates: TritonRates | None

    @property
    def ok(self) -> bool:
        """True when ``/metrics`` was read."""
        return self.sources[ScrapeSource.METRICS].ok


@dataclass(frozen=True, slots=True)
class ModelState:
    """The latest readings of one configured model; None where the window had no data.

    ``server_summary`` is Triton's request-duration summary (microseconds, as printed)
    when the server exports summaries. ``canary_mean_seconds`` is the canary's mean
    end-to-end latency over the same window as ``rates`` (None when it sent nothing).
    ``breakdown`` and ``bottleneck`` are the judgement's, not the scrape's: the scraper
    leaves them None and :func:`~tritonwatch.analysis.breakdown.judge_target` fills them.
    ``llm_readings`` are the LLM backend's gauges and counters from the last scrape (None
    for a model whose page prints none) and ``llm`` their rates over the same window as
    ``rates``.
    """

    model: str
    rates: ModelRates | None = None
    server_summary: TritonSummary | None = None
    batches: BatchStatisticsRates | None = None
    breakdown: LatencyBreakdown | None = None
    bottleneck: Bottleneck | None = None
    config: ModelConfigSnapshot | None = None
    canary_mean_seconds: float | None = None
    llm_readings: LlmReadings | None = None
    llm: LlmRates | None = None
    composing_models: tuple[str, ...] = ()
    """The models a BLS model calls, from its config entry
    (:attr:`~tritonwatch.config.schema.WatchedModel.composing_models`); an ensemble's
    steps are in its ``config.traits``."""
    canary_requests_per_second: float | None = None
    """The canary's own requests per second on the model over the same window as
    ``rates``: a caller the scrape knows of, when the model is also a pipeline's step."""
    steps: StepBreakdown | None = None
    """The judgement's, like ``breakdown``: filled for an ensemble or a BLS model with
    composing models by :func:`~tritonwatch.analysis.breakdown.judge_target`."""

    @property
    def cache(self) -> CacheRates | None:
        """The response cache's readings over the last window, from one of two sources:
        ``/metrics``' ``nv_cache_*_per_model`` families (``rates.cache``) when the page
        prints them for the model, else the statistics API's ``cache_hit``/``cache_miss``
        (``batches.cache``), for a server whose page lacks them (metrics off, a proxy
        that filters families). ``/metrics`` wins when both are there; None when
        neither has the model's cache."""
        if self.rates is not None and self.rates.cache is not None:
            return self.rates.cache
        return self.batches.cache if self.batches is not None else None


@dataclass(frozen=True, slots=True)
class TargetState:
    """Everything exported for one target, as of its last cycle.

    ``sources`` has the last attempt of each source the server supports; ``server``
    holds Triton's server-wide gauges (``nv_cpu_*``, pinned memory) from the last scrape;
    ``failures`` counts the failed attempts so far by source and outcome.
    """

    target: str
    sources: Mapping[ScrapeSource, SourceOutcome]
    bad_lines_total: int
    models: Mapping[str, ModelState]
    gpus: Mapping[str, TritonGpuRates]
    server: Mapping[str, float]
    failures: Mapping[tuple[ScrapeSource, FetchStatus], int] = field(default_factory=dict)
    composing: Mapping[str, ModelState] = field(default_factory=dict)
    """The readings (rates, config) of the models the watched ones compose — ensemble
    steps, recursively, and BLS ``composing_models`` — that are not watched themselves:
    read for the step breakdown, never exported as watched models."""

    def model_state(self, name: str) -> ModelState | None:
        """A watched or a composing model's state, by name."""
        return self.models.get(name) or self.composing.get(name)


GpuT = TypeVar("GpuT")


def model_gpus(gpus: Sequence[GpuT], indices: Iterable[int]) -> list[GpuT]:
    """The GPUs a model's instances run on, from Triton's GPUs in the order it prints them
    (device order) and the instance groups' ``gpus`` indices; without usable indices,
    every GPU counts."""
    chosen = [gpus[i] for i in sorted(set(indices)) if 0 <= i < len(gpus)]
    return chosen or list(gpus)
