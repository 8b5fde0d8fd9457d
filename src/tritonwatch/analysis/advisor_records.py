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
from tritonwatch.observations import ModelRates

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
    """Canary end-to-end mean: what a client waits, network and serialisation included."""
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

    def share(self, seconds: float | None) -> float | None:
        """``seconds`` as a fraction of Triton's request time."""
        if seconds is None or not self.request_seconds:
            return None
        return seconds / self.request_seconds

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

    @property
    def proposed_change(self) -> str:
        return f"{self.parameter}: {self.current} → {self.proposed}"


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
