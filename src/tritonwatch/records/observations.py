"""The immutable records every source emits (docs/design.md §1).

Sources only observe; judgement happens later in pure functions over these
records. Timestamps are monotonic seconds (``time.monotonic``) so that wall-clock
jumps never distort rates or windows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import NamedTuple

from tritonwatch.records.model_traits import ModelTraits, model_traits


class Outcome(StrEnum):
    """How one request to a server ended; exported as the ``outcome`` label."""

    SUCCESS = "success"
    TIMEOUT = "timeout"
    HTTP_ERROR = "http_error"
    GRPC_ERROR = "grpc_error"
    CONNECTION_ERROR = "connection_error"
    BAD_RESPONSE = "bad_response"
    """The server answered something no client could read (ours and the library's)."""
    CLIENT_ERROR = "client_error"
    """Our fast path could not read an answer the library path read: our bug, not the
    server's. Counted, logged, and left out of the availability SLO."""
    TOO_LARGE = "too_large"
    """The answer outgrew a configured bound (``canary.limits``): an outcome, never an OOM."""
    REJECTED = "rejected"
    """The server refused the canary's own request as invalid (HTTP 400, gRPC
    ``INVALID_ARGUMENT``) for a model it serves: the canary's input, not the server, is
    at fault (give ``canary.input_data``). Left out of the availability SLO."""


NOT_THE_SERVERS: frozenset[str] = frozenset({Outcome.CLIENT_ERROR, Outcome.REJECTED})
"""Outcomes that say nothing about the server: left out of the availability SLO's
events (in process and in the generated rules) and of "not serving"."""


@dataclass(frozen=True, slots=True)
class ReadinessObservation:
    """One readiness check of a target (``GET /v2/health/ready`` or gRPC ``ServerReady``)."""

    target: str
    at: float
    outcome: Outcome
    ready: bool
    duration_seconds: float
    error: str = ""


@dataclass(frozen=True, slots=True)
class CanaryResult:
    """One canary request. ``latency_seconds`` counts from when the canary's thread took
    the request up at (or after) its *intended* send time, waits for a free connection or
    in-flight slot included, so a stalled server shows in the tail instead of being
    hidden (coordinated omission); it is None for errors that say nothing about latency
    (refused connections). ``send_lateness_seconds`` is how late the canary's own thread
    woke for it: the client's scheduling, not the server's, kept out of the latency."""

    target: str
    model: str
    protocol: str
    at: float
    outcome: Outcome
    latency_seconds: float | None
    error: str = ""
    send_lateness_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class StreamResult:
    """One streamed canary request (a decoupled model, or an OpenAI-compatible server),
    timed as docs/design.md §5 defines (genai-perf's and vLLM's definitions, A6 of
    docs/plans/issue18.md), because for generative models the whole-request latency is
    not what users feel.

    ``ttft_seconds`` runs from the request's origin (as :attr:`CanaryResult.latency_seconds`
    does) to the first response that carries output; ``gaps_seconds`` are every gap
    between consecutive content-bearing responses (vLLM's ``itl``), one per gap.
    ``itl_per_request_seconds`` is genai-perf's one-per-request value (first to last
    content response over ``output_tokens - 1``; None with fewer than two tokens or two
    content responses). ``output_tokens`` is the server's count when it gave one
    (``tokens_reported``), else the number of content-bearing responses. ``total_seconds``
    runs to the end of the stream; None where the failure says nothing about time.
    """

    target: str
    model: str
    protocol: str
    at: float
    outcome: Outcome
    ttft_seconds: float | None
    gaps_seconds: tuple[float, ...]
    output_tokens: int
    total_seconds: float | None
    itl_per_request_seconds: float | None
    error: str = ""
    send_lateness_seconds: float | None = None
    tokens_reported: bool = False

    def as_canary_result(self) -> CanaryResult:
        """The plain request record (latency = the whole stream), so request counters,
        the availability SLO (and a latency SLO, where one is written for a stream) and
        the circuit breaker count a streamed request exactly as any other."""
        return CanaryResult(
            self.target,
            self.model,
            self.protocol,
            self.at,
            self.outcome,
            self.total_seconds,
            self.error,
            self.send_lateness_seconds,
        )


TargetModel = tuple[str, str]
"""(target name, model name): one watched model, whatever its versions."""


class ModelKey(NamedTuple):
    """A model as Triton's per-model series name it: ``model`` and ``version`` labels."""

    model: str
    version: str


@dataclass(frozen=True, slots=True)
class TritonSummary:
    """One summary family of one model, as Triton printed it.

    Quantiles are over Triton's sliding window (60 s by default); an idle model prints
    ``NaN`` and NaN is kept, so "no data" stays distinguishable from "zero latency".
    """

    quantiles: Mapping[float, float]
    sum: float | None
    count: float | None


@dataclass(frozen=True, slots=True)
class TritonHistogram:
    """One histogram family of one model: cumulative ``(le, count)`` buckets sorted by ``le``."""

    buckets: tuple[tuple[float, float], ...]
    sum: float | None
    count: float | None


@dataclass(frozen=True, slots=True)
class ModelCounters:
    """Everything one scrape said about one (model, version), keyed by ``nv_*`` family name.

    Values are summed over ``gpu_uuid`` (and any label other than model, version,
    reason, quantile and le), so a model with instances on several GPUs is one model.
    ``counters[nv_inference_request_failure]`` is the total over reasons; the split is
    in ``failures_by_reason``, where servers older than 24.07 (no ``reason`` label)
    report everything under :data:`~tritonwatch.scrape.triton_families.UNKNOWN_FAILURE_REASON`.
    """

    model: str
    version: str
    counters: Mapping[str, float]
    gauges: Mapping[str, float]
    failures_by_reason: Mapping[str, float]
    summaries: Mapping[str, TritonSummary]
    histograms: Mapping[str, TritonHistogram]
    llm: Mapping[tuple[str, str], float] = field(default_factory=lambda: MappingProxyType({}))
    """LLM backend gauges and counters (:mod:`~tritonwatch.scrape.llm_families`) keyed by
    ``(family, split label value or "")``; their histograms are in ``histograms``."""


@dataclass(frozen=True, slots=True)
class RawSeries:
    """A sample of a family we do not model (another backend's metrics)."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass(frozen=True, slots=True)
class TritonScrape:
    """One parsed ``/metrics`` page of one Triton server.

    ``at`` is the caller's monotonic clock when the scrape completed. ``samples``
    counts the sample lines read (unknown families included) and ``bad_lines`` those
    skipped because they could not be read or used (the scrape never fails for them).
    ``gpus`` maps ``gpu_uuid`` → family → value and ``server`` holds the unlabelled
    server-wide gauges (CPU, pinned memory, old cache).
    """

    at: float
    models: Mapping[ModelKey, ModelCounters]
    gpus: Mapping[str, Mapping[str, float]]
    server: Mapping[str, float]
    samples: int
    bad_lines: int
    unknown_families: frozenset[str]
    unknown_series: tuple[RawSeries, ...] = ()


@dataclass(frozen=True, slots=True)
class CacheRates:
    """What Triton's response cache did for one model between two scrapes
    (``nv_cache_num_{hits,misses}_per_model``, ``nv_cache_{hit,miss}_duration_per_model``),
    or between two reads of the statistics API (``inference_stats.cache_hit`` and
    ``cache_miss``: the same counts, the durations in nanoseconds).

    ``hit_ratio`` is hits / (hits + misses), None when nothing was looked up.
    ``hit_seconds_average`` is the mean time a hit spent in the cache (Triton's "cache
    hit duration"), ``miss_seconds_average`` the mean of a miss (its lookup plus inserting
    the new response); None without hits (misses) in the window or without the duration
    families.
    A hit's request never executes: its time is in ``request`` and ``queue`` averages
    only, which is why the compute averages divide by executed requests.
    """

    hits_per_second: float
    misses_per_second: float
    hit_ratio: float | None
    hit_seconds_average: float | None
    miss_seconds_average: float | None


@dataclass(frozen=True, slots=True)
class ModelRates:
    """What one model did between two scrapes of the same server (docs/design.md §4).

    Averages are per successful request in seconds, and ``None`` when no request
    completed in the interval (no traffic is not zero latency). Rates are ``None`` when
    the server does not print the family. ``counters_reset`` says a counter went down
    (a restart or reload), so increases were taken from zero, as Prometheus' ``rate()`` does.
    """

    model: str
    version: str
    interval_seconds: float
    counters_reset: bool
    requests_per_second: float | None
    inferences_per_second: float | None
    executions_per_second: float | None
    failures_per_second: float | None
    failures_per_second_by_reason: Mapping[str, float]
    batch_size_average: float | None
    request_seconds_average: float | None
    queue_seconds_average: float | None
    compute_input_seconds_average: float | None
    compute_infer_seconds_average: float | None
    compute_output_seconds_average: float | None
    pending_requests: float | None
    cache: CacheRates | None = None
    """The response cache's numbers; None for a model whose page prints no per-model
    hit *and* miss counters (cache off, or a server older than 23.03)."""


@dataclass(frozen=True, slots=True)
class TritonGpuRates:
    """One GPU as Triton (through DCGM) reported it, latest gauges plus the power from energy."""

    gpu_uuid: str
    interval_seconds: float
    utilization_ratio: float | None
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    power_watts: float | None
    power_limit_watts: float | None
    energy_joules: float | None
    energy_watts: float | None


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A compute process on a GPU; memory is None where the driver cannot tell (WDDM, MIG)."""

    pid: int
    used_memory_bytes: int | None


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One NVML reading of one GPU (or one MIG device), in base units.

    Every reading is None when its query is unsupported on this device or failed this
    time; ``unsupported`` names the queries the device answered ``NotSupported`` and
    ``failures`` the ``(query, NVML error class)`` pairs that failed in this sample.
    ``memory_used_bytes`` is total − free, i.e. it includes the driver's reservation
    (what NVML's v1 ``used`` reports; v2 splits that out as ``memory_reserved_bytes``).
    GPM ratios need two samples ≥ 100 ms apart, so the first sample has none.
    """

    at: float
    uuid: str
    index: int
    name: str
    mig_index: int | None = None
    parent_uuid: str | None = None
    utilization_ratio: float | None = None
    memory_utilization_ratio: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    energy_joules: float | None = None
    sm_clock_hertz: float | None = None
    memory_clock_hertz: float | None = None
    temperature_celsius: float | None = None
    fan_speed_ratio: float | None = None
    clock_event_reasons: frozenset[str] | None = None
    processes: tuple[GpuProcess, ...] | None = None
    sm_active_ratio: float | None = None
    sm_occupancy_ratio: float | None = None
    tensor_active_ratio: float | None = None
    unsupported: frozenset[str] = frozenset()
    failures: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class TritonRates:
    """What happened on one Triton server between two of its scrapes.

    Only models and GPUs present in both scrapes have rates: like Prometheus'
    ``rate()``, a series needs two points.
    """

    interval_seconds: float
    models: Mapping[ModelKey, ModelRates]
    gpus: Mapping[str, TritonGpuRates]


@dataclass(frozen=True, slots=True)
class ModelStatistics:
    """One model's cumulative counters from Triton's statistics extension
    (``GET v2/models/{m}[/versions/{v}]/stats``), summed over versions when the config
    names none.

    ``batch_executions`` maps each executed batch size to how many model executions ran
    at that size (``batch_stats[].compute_infer.count``): the real batch-size
    distribution, which ``/metrics`` only gives as an average. The statistics live with
    the loaded model, so a reload that replaces the model starts them again from zero.

    ``cache_hits``/``cache_hit_ns`` and ``cache_misses``/``cache_miss_ns`` are
    ``inference_stats.cache_hit`` and ``cache_miss`` (count and total nanoseconds: a
    hit's lookup, a miss's lookup plus inserting the new response). Triton prints both
    for every model, {0, 0} where the model has no response cache.
    """

    model: str
    version: str
    at: float
    inference_count: int
    execution_count: int
    success_count: int
    batch_executions: Mapping[int, int]
    cache_hits: int = 0
    cache_hit_ns: int = 0
    cache_misses: int = 0
    cache_miss_ns: int = 0
    versions: tuple[str, ...] = ()
    """The versions the answer reported (sorted): a changed set is a new version loaded."""


@dataclass(frozen=True, slots=True)
class BatchStatisticsRates:
    """What the batch scheduler (and the response cache) did between two statistics
    reads of one model.

    ``batch_size_average`` is Σ size·Δexecutions / ΣΔexecutions over ``batch_stats``,
    None when nothing executed. ``counters_reset`` says a count went down (a restart or
    a reload that replaced the model), so increases were taken from zero.
    """

    model: str
    version: str
    interval_seconds: float
    counters_reset: bool
    executions_per_second_by_size: Mapping[int, float]
    batch_size_average: float | None
    cache: CacheRates | None = None
    """The response cache's numbers from ``cache_hit``/``cache_miss``
    (:func:`~tritonwatch.scrape.statistics_cache.statistics_cache_rates`); None for a
    model whose config does not enable the cache and whose statistics never counted a
    lookup. :attr:`~tritonwatch.records.target_state.ModelState.cache` says which
    source a model's readings come from."""


@dataclass(frozen=True, slots=True)
class DynamicBatching:
    """The dynamic batcher's settings in a model config."""

    preferred_batch_size: tuple[int, ...]
    max_queue_delay_microseconds: int


@dataclass(frozen=True, slots=True)
class InstanceGroup:
    """One ``instance_group`` entry. For ``KIND_GPU`` Triton starts ``count`` instances on
    *each* listed GPU (a loaded config always lists them), so ``instances`` is
    ``count × len(gpus)`` there and ``count`` for every other kind."""

    name: str
    kind: str
    count: int
    gpus: tuple[int, ...]

    @property
    def instances(self) -> int:
        if self.kind == "KIND_GPU" and self.gpus:
            return self.count * len(self.gpus)
        return self.count


@dataclass(frozen=True, slots=True)
class ModelConfigSnapshot:
    """A model's configuration as ``GET v2/models/{m}/config`` printed it.

    The typed fields are the ones tuning changes; ``raw`` keeps the whole JSON document
    (treat it as read-only) so that a change to any field is seen and named.
    """

    model: str
    at: float
    max_batch_size: int
    dynamic_batching: DynamicBatching | None
    instance_groups: tuple[InstanceGroup, ...]
    raw: Mapping[str, object]
    traits: ModelTraits = field(init=False)
    """What kind of model the config describes (ensemble steps, Python backend, sequence
    batching, response cache, decoupled): :func:`~tritonwatch.records.model_traits.model_traits`
    of ``raw``, derived from it on construction so the two never disagree."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "traits", model_traits(self.raw))


@dataclass(frozen=True, slots=True)
class ModelConfigChange:
    """A model's configuration differed between two polls of the config API.

    ``changes`` maps each changed field, as a dotted path into the JSON
    (``dynamic_batching.max_queue_delay_microseconds``, ``instance_group[0].count``), to
    its ``(old, new)`` values; a field present on one side only has None on the other.
    """

    target: str
    model: str
    at: float
    previous: ModelConfigSnapshot
    current: ModelConfigSnapshot
    changes: Mapping[str, tuple[object, object]]


CLOCK_EVENT_REASONS: tuple[tuple[str, int], ...] = (
    ("gpu_idle", 0x1),
    ("applications_clocks_setting", 0x2),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal_slowdown", 0x20),
    ("hw_thermal_slowdown", 0x40),
    ("hw_power_brake_slowdown", 0x80),
    ("display_clock_setting", 0x100),
)
"""``reason`` label → NVML's ``nvmlClocksEventReason*`` bit (stable across NVML versions,
so older bindings that name them ``ClocksThrottleReason`` read the same bits)."""

QueryFailureKey = tuple[str, str, str]
"""(GPU uuid, query, NVML error class name)."""


@dataclass(frozen=True, slots=True)
class NvmlState:
    """What the NVML sampler holds for the exporter: the latest samples and failure counts."""

    enabled: bool
    samples: tuple[GpuSample, ...]
    query_failures: Mapping[QueryFailureKey, int]
