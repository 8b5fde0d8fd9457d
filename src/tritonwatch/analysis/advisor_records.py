"""What the advisor reads and writes: its input (one model over the evaluation window),
its thresholds, and the recommendations it makes.

Kept apart from the rules so that the daemon, tests and the simulator matrix build
inputs without importing any judgement. Every number is an average over the window
(docs/design.md §7) in base units; ``None`` means "not known" (no traffic, no GPU metrics, a
server without the statistics), and a rule that needs an unknown number stays silent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType

from tritonwatch.analysis.slo import Severity
from tritonwatch.records.llm_records import LlmRates, LlmReadings
from tritonwatch.records.observations import ModelRates

REJECTED = "REJECTED"
"""Triton's failure reason for requests its queue policy refused
(``nv_inference_request_failure{reason="REJECTED"}``)."""


@dataclass(frozen=True, slots=True)
class AdvisorInput:
    """One model over the evaluation window."""

    target: str
    model: str
    latency_budget_seconds: float
    """The latency SLO threshold the p95 is judged against."""
    p95_seconds: float | None = None
    """Canary end-to-end p95."""
    client_mean_seconds: float | None = None
    """Canary end-to-end mean: what a client waits, network and serialisation included,
    the canary's own send lateness not (reported apart: it is the client host's)."""
    request_seconds: float | None = None
    """Triton's average request time (``nv_inference_request_duration_us`` per success)."""
    queue_seconds: float | None = None
    compute_input_seconds: float | None = None
    compute_infer_seconds: float | None = None
    compute_output_seconds: float | None = None
    requests_per_second: float | None = None
    batch_size_average: float | None = None
    max_batch_size: int | None = None
    dynamic_batching: bool | None = None
    max_queue_delay_microseconds: int | None = None
    instance_count: int | None = None
    gpu_utilization: float | None = None
    gpu_memory_used_bytes: float | None = None
    gpu_memory_total_bytes: float | None = None
    pending_requests: float | None = None
    failures_per_second_by_reason: Mapping[str, float] = field(
        default_factory=lambda: MappingProxyType({})
    )
    protocol: str | None = None
    """The canary's protocol (http or grpc), for network advice."""
    last_change_added_instance: bool = False
    throughput_before_last_change: float | None = None
    """Requests/s in the window before the last config change, when it added an instance."""
    sweep_plateau: bool = False
    """A sweep saw throughput stop growing with concurrency (heavy load without a queue)."""
    streaming: bool = False
    """A generative model: decoupled in its config, streamed by the canary, or with LLM
    serving numbers on its page."""
    ttft_p95_seconds: float | None = None
    """The streaming canary's time-to-first-token p95 (5 minutes)."""
    itl_p95_seconds: float | None = None
    """The streaming canary's inter-token gap p95 (5 minutes)."""
    ttft_budget_seconds: float | None = None
    """The TTFT SLO threshold; None without a TTFT SLO."""
    itl_budget_seconds: float | None = None
    ttft_burning: bool = False
    """A page or ticket burn condition of the TTFT SLO fires."""
    itl_burning: bool = False
    server_ttft_mean_seconds: float | None = None
    """The server's own mean TTFT over the window (vLLM, TensorRT-LLM or Triton's
    first-response histogram): evidence of slow first tokens where no canary streams."""
    kv_cache_usage_ratio: float | None = None
    requests_running: float | None = None
    """Sequences the LLM engine runs (TensorRT-LLM scheduled, vLLM running)."""
    requests_waiting: float | None = None
    """Sequences waiting for the engine to admit them."""
    requests_max: float | None = None
    """The engine's limit on concurrent sequences, when its page prints it."""
    preemptions_per_second: float | None = None
    paused_requests: float | None = None
    """TensorRT-LLM's paused requests, its nearest thing to a preemption count."""
    llm_backend: str | None = None
    """``tensorrt_llm``, ``vllm`` or ``triton``: which knob names the advice uses."""
    instance_kind: str | None = None
    """``KIND_CPU`` or ``KIND_GPU`` when every instance group has that kind, else None."""
    host_cpu_utilization: float | None = None
    """Triton's ``nv_cpu_utilization`` (0–1, the whole host) at the last scrape."""
    python_backend: bool = False
    """``backend: "python"``: its compute is Python code and whatever it calls, which no
    quantisation, TensorRT or fusion shortens (``optimize_model`` never applies)."""
    executions_per_second: float | None = None
    """Model executions per second over the window (``nv_inference_exec_count``). 0 while
    requests completed means every one was a response-cache hit: the window says nothing
    about the model's own stages, and no advice reads them."""

    def share(self, seconds: float | None) -> float | None:
        """``seconds`` as a fraction of Triton's request time."""
        if seconds is None or not self.request_seconds:
            return None
        return seconds / self.request_seconds

    @property
    def never_executed(self) -> bool:
        """Requests completed in the window and none executed (all cache hits)."""
        return self.executions_per_second == 0 and bool(self.requests_per_second)

    @property
    def gpu_memory_used_ratio(self) -> float | None:
        if self.gpu_memory_used_bytes is None or not self.gpu_memory_total_bytes:
            return None
        return self.gpu_memory_used_bytes / self.gpu_memory_total_bytes

    @property
    def concurrency(self) -> float | None:
        """Requests in the server on average: queued ones, or Little's law (rate × time)."""
        in_server = None
        if self.requests_per_second is not None and self.request_seconds is not None:
            in_server = self.requests_per_second * self.request_seconds
        known = [v for v in (self.pending_requests, in_server) if v is not None]
        return max(known) if known else None

    @property
    def queued_requests(self) -> float | None:
        """Requests waiting for the model: Triton's pending count, else the LLM engine's
        waiting sequences (a vLLM server's page has no pending count)."""
        return self.pending_requests if self.pending_requests is not None else self.requests_waiting


@dataclass(frozen=True, slots=True)
class AdvisorThresholds:
    """Where each rule draws its line (docs/design.md §7, all configurable)."""

    gpu_underuse_threshold: float = 0.5
    """GPU utilisation below this, while requests queue, is underuse."""
    gpu_busy_threshold: float = 0.8
    dominant_share: float = 0.5
    """A stage at least this share of server time dominates it (queue, compute_infer)."""
    io_dominant_share: float = 0.4
    """compute_input + compute_output at least this share of server time is I/O-bound."""
    queueing_share: float = 0.2
    """Queue time at least this share of server time means requests queue…"""
    queue_budget_share: float = 0.1
    """…and at least this share of the latency budget (5 ms of 50 ms), so that a fast
    model's batching delay alone does not count as requests waiting for an instance…"""
    queued_requests_min: float = 1.0
    """…as does at least this many requests pending on average."""
    heavy_load_pending: float = 4.0
    """Pending requests that count as heavy load for fuller batches."""
    small_batch_fraction: float = 0.5
    """Average batch below this fraction of max_batch_size is a small batch."""
    p95_headroom_fraction: float = 0.8
    """p95 at most this fraction of the budget leaves room to wait for fuller batches."""
    memory_headroom_ratio: float = 0.8
    """GPU memory used at most this share of total has room for one more instance."""
    memory_scarce_ratio: float = 0.9
    """GPU memory used at least this share of total is scarce."""
    instance_stall_gain: float = 0.05
    """After an added instance, a throughput gain below this is a stall."""
    concurrency_min: float = 2.0
    """Requests in flight on average from which dynamic batching has something to batch."""
    network_share: float = 0.5
    """Client time outside the server at least this share of client end to end…"""
    network_gap_min_seconds: float = 0.010
    """…and at least this long (above the canary's own ~2.5 ms) is network-bound."""
    rejected_per_second_min: float = 0.0
    """REJECTED failures per second above this call for queue-policy advice."""
    queue_delay_step: float = 2.0
    """max_queue_delay_microseconds is divided or multiplied by this."""
    first_queue_delay_microseconds: int = 100
    """The delay proposed when it is 0 and batches should fill."""
    kv_cache_full_ratio: float = 0.9
    """KV-cache usage at least this share is full…"""
    waiting_requests_min: float = 1.0
    """…and pressure when at least this many sequences wait for admission…"""
    preemptions_per_second_min: float = 0.0
    """…or preemptions per second exceed this (or TensorRT-LLM pauses requests)."""
    running_high_share: float = 0.8
    """Running sequences at least this share of the engine's maximum fill its batch."""
    cpu_spare_threshold: float = 0.5
    """Host CPU (Triton's ``nv_cpu_utilization``) below this has room for one more
    ``KIND_CPU`` instance whose saturated peers wait rather than compute."""
    cpu_saturated_threshold: float = 0.9
    """Host CPU at least this is saturated: the queue is the host's, and neither more
    instances nor a shorter batching delay would shorten it."""


class Action(StrEnum):
    """What a recommendation asks for; exported as the ``action`` label."""

    REMOVE_INSTANCE = "remove_instance"
    LOWER_QUEUE_DELAY = "lower_queue_delay"
    ENABLE_DYNAMIC_BATCHING = "enable_dynamic_batching"
    ADD_INSTANCE = "add_instance"
    RAISE_QUEUE_DELAY = "raise_queue_delay"
    OPTIMIZE_MODEL = "optimize_model"
    REDUCE_IO = "reduce_io"
    REDUCE_NETWORK_OVERHEAD = "reduce_network_overhead"
    TUNE_QUEUE_POLICY = "tune_queue_policy"
    REDUCE_KV_PRESSURE = "reduce_kv_pressure"
    SCALE_OUT_PREFILL = "scale_out_prefill"
    LOWER_MAX_SEQUENCES = "lower_max_sequences"


@dataclass(frozen=True, slots=True)
class Recommendation:
    """One piece of advice for one model, with the numbers behind it."""

    target: str
    model: str
    action: Action
    parameter: str
    current: int | str
    proposed: int | str
    severity: Severity
    reason: str
    evidence: Mapping[str, float]
    expected_effect: str
    config_change: bool
    """True when applying it means changing the model's configuration (one at a time)."""
    pipeline: str = ""
    """The watched pipeline (an ensemble, a BLS model) whose latency SLO this serves when
    ``model`` is one of its steps; "" for the model's own advice
    (:mod:`~tritonwatch.analysis.pipeline_advice`)."""

    @property
    def proposed_change(self) -> str:
        return f"{self.parameter}: {self.current} → {self.proposed}"

    @property
    def source(self) -> str:
        """The watched model whose evaluation made it: the pipeline, else the model."""
        return self.pipeline or self.model


def _weighted(pairs: Iterable[tuple[float | None, float]]) -> float | None:
    """Σ value·weight / Σ weight over the known values; None when nothing is known."""
    known = [(v, w) for v, w in pairs if v is not None and w > 0]
    weight = sum(w for _, w in known)
    return sum(v * w for v, w in known) / weight if weight > 0 else None


def with_server_window(model: AdvisorInput, rates: Sequence[ModelRates]) -> AdvisorInput:
    """``model`` with its server numbers averaged over the scrape intervals in ``rates``.

    Rates and the pending gauge are time-weighted; per-request stage times are weighted
    by the requests each interval completed, and the batch size by executions, so a
    busy minute counts for more than an idle one (the window's true averages).
    """
    spans = [r.interval_seconds for r in rates]
    requests = [(r.requests_per_second or 0.0) * r.interval_seconds for r in rates]
    executions = [(r.executions_per_second or 0.0) * r.interval_seconds for r in rates]
    reasons = sorted({reason for r in rates for reason in r.failures_per_second_by_reason})

    def per_request(stage: Callable[[ModelRates], float | None]) -> float | None:
        return _weighted((stage(r), n) for r, n in zip(rates, requests, strict=True))

    return replace(
        model,
        requests_per_second=_weighted(
            (r.requests_per_second, s) for r, s in zip(rates, spans, strict=True)
        ),
        executions_per_second=_weighted(
            (r.executions_per_second, s) for r, s in zip(rates, spans, strict=True)
        ),
        request_seconds=per_request(lambda r: r.request_seconds_average),
        queue_seconds=per_request(lambda r: r.queue_seconds_average),
        compute_input_seconds=per_request(lambda r: r.compute_input_seconds_average),
        compute_infer_seconds=per_request(lambda r: r.compute_infer_seconds_average),
        compute_output_seconds=per_request(lambda r: r.compute_output_seconds_average),
        batch_size_average=_weighted(
            (r.batch_size_average, n) for r, n in zip(rates, executions, strict=True)
        ),
        pending_requests=_weighted(
            (r.pending_requests, s) for r, s in zip(rates, spans, strict=True)
        ),
        failures_per_second_by_reason=MappingProxyType(
            {
                reason: _weighted(
                    (r.failures_per_second_by_reason.get(reason, 0.0), s)
                    for r, s in zip(rates, spans, strict=True)
                )
                or 0.0
                for reason in reasons
            }
        ),
    )


LlmSample = tuple[LlmReadings, LlmRates | None]
"""One scrape's LLM readings of a model and its rates over that scrape's interval."""


def _mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def with_llm_window(model: AdvisorInput, samples: Sequence[LlmSample]) -> AdvisorInput:
    """``model`` with its LLM engine's numbers over the scrapes in ``samples`` (oldest
    first): gauges (KV usage, running, waiting, paused) averaged over the scrapes, rates
    (preemptions, the server's mean TTFT) time-weighted over their intervals, as
    :func:`with_server_window` weights Triton's. No samples: ``model`` unchanged."""
    if not samples:
        return model
    readings = [r for r, _ in samples]
    rates = [r for _, r in samples if r is not None]
    return replace(
        model,
        streaming=True,
        llm_backend=readings[-1].backend,
        kv_cache_usage_ratio=_mean(r.kv_cache_usage_ratio for r in readings),
        requests_running=_mean(r.requests_running for r in readings),
        requests_waiting=_mean(r.requests_waiting for r in readings),
        requests_max=readings[-1].requests_max,
        paused_requests=_mean(r.paused_requests for r in readings),
        preemptions_per_second=_weighted(
            (r.preemptions_per_second, r.interval_seconds) for r in rates
        ),
        server_ttft_mean_seconds=_weighted(
            (r.ttft_mean_seconds, r.interval_seconds) for r in rates
        ),
    )
