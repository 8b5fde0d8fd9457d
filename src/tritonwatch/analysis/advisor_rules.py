"""The advisor's rules (docs/design.md §7's table), each a small pure function of a window.

A rule returns a :class:`Finding` (what to change, from what to what, why, the
numbers, the expected effect) or None. :data:`RULES` is the one table of rules in
priority order, with each rule's action, severity and whether it changes the model's
configuration; :func:`tritonwatch.analysis.advisor.advise` picks from it. The order
puts safety first (memory), then the SLO (queue delay over budget), then throughput.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tritonwatch.analysis.advisor_records import (
    REJECTED,
    Action,
    AdvisorInput,
    AdvisorThresholds,
)
from tritonwatch.analysis.slo import Severity


@dataclass(frozen=True, slots=True)
class Finding:
    """A rule's verdict before it is stamped with the rule's action and severity."""

    parameter: str
    current: int | str
    proposed: int | str
    reason: str
    evidence: dict[str, float | None]
    """The numbers behind the verdict; unknown ones (None) are left out of the result."""
    expected_effect: str


Check = Callable[[AdvisorInput, AdvisorThresholds], Finding | None]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _percent(ratio: float) -> str:
    return f"{ratio * 100:.0f} %"


def requests_queue(m: AdvisorInput, t: AdvisorThresholds) -> bool:
    """Requests wait: enough of them pending, or queue time a real share of server time
    *and* of the latency budget — a fast model's sub-millisecond batching delay is a
    large share of its server time without anyone waiting for an instance."""
    queue_share = m.share(m.queue_seconds)
    long_enough = (
        m.queue_seconds is not None
        and m.queue_seconds >= t.queue_budget_share * m.latency_budget_seconds
    )
    return (m.pending_requests is not None and m.pending_requests >= t.queued_requests_min) or (
        queue_share is not None and queue_share >= t.queueing_share and long_enough
    )


def gpu_underused(m: AdvisorInput, t: AdvisorThresholds) -> bool:
    """GPU utilisation below the threshold over the window while requests queue."""
    return (
        m.gpu_utilization is not None
        and m.gpu_utilization < t.gpu_underuse_threshold
        and requests_queue(m, t)
    )


def remove_instance(m: AdvisorInput, t: AdvisorThresholds) -> Finding | None:
    """GPU memory scarce, or the last added instance bought no throughput."""
    if m.instance_count is None or m.instance_count < 2:
        return None
    used = m.gpu_memory_used_ratio
    if used is not None and used >= t.memory_scarce_ratio:
        return Finding(
            "instance_group.count",
            m.instance_count,
            m.instance_count - 1,
            f"GPU memory is {_percent(used)} used (scarce from {_percent(t.memory_scarce_ratio)})",
            {"gpu_memory_used_ratio": used, "instance_count": m.instance_count},
            f"frees about 1/{m.instance_count} of the model's GPU memory and the risk of "
            "out-of-memory failures when anything else loads",
        )
    before, now = m.throughput_before_last_change, m.requests_per_second
    if m.last_change_added_instance and before is not None and now is not None and before > 0:
        gain = now / before - 1.0
        if gain < t.instance_stall_gain:
            return Finding(
                "instance_group.count",
                m.instance_count,
                m.instance_count - 1,
                f"the last added instance changed throughput by {gain:+.1%} "
                f"({before:.1f}/s → {now:.1f}/s)",
                {"throughput_before": before, "throughput_after": now, "gain": gain},
                "the same throughput with one instance less: its memory back, less contention",
            )
    return None


def lower_queue_delay(m: AdvisorInput, t: AdvisorThresholds) -> Finding | None:
    """p95 over budget because requests wait for batches to fill."""
    delay, p95 = m.max_queue_delay_microseconds, m.p95_seconds
    queue_share = m.share(m.queue_seconds)
    if not m.dynamic_batching or not delay or p95 is None or queue_share is None:
        return None
    if p95 <= m.latency_budget_seconds or queue_share < t.dominant_share:
        return None
    proposed = int(delay / t.queue_delay_step)
    return Finding(
        "max_queue_delay_microseconds",
        delay,
        proposed,
        f"p95 {_ms(p95)} is over the {_ms(m.latency_budget_seconds)} budget and queue time is "
        f"{_percent(queue_share)} of server time",
        {
            "p95_seconds": p95,
            "latency_budget_seconds": m.latency_budget_seconds,
            "queue_seconds": m.queue_seconds,
            "queue_share": queue_share,
        },
        f"requests wait up to {_ms((delay - proposed) / 1e6)} less for a batch to fill; "
        "p95 falls by about as much, batches get smaller",
    )


def enable_dynamic_batching(m: AdvisorInput, t: AdvisorThresholds) -> Finding | None:
    """A batching-capable model under concurrent load runs every request alone."""
    concurrency = m.concurrency
    if m.dynamic_batching is not False or m.max_batch_size is None or m.max_batch_size < 2:
        return None
    if concurrency is None or concurrency < t.concurrency_min:
        return None
    return Finding(
        "dynamic_batching",
        "disabled",
        "enabled",
        f"{concurrency:.1f} requests in flight on average, max_batch_size {m.max_batch_size}, "
        "but every execution runs one request",
        {"concurrency": concurrency, "max_batch_size": m.max_batch_size},
        "requests that arrive together run as one batch: more throughput from the same GPU "
        "time, less queueing under load",
    )


def add_instance(m: AdvisorInput, t: AdvisorThresholds) -> Finding | None:
    """GPU underused while requests queue, with memory for one more instance."""
    used = m.gpu_memory_used_ratio
    if m.instance_count is None or m.gpu_utilization is None or used is None:
        return None
    if not gpu_underused(m, t) or used > t.memory_headroom_ratio:
        return None
    return Finding(
        "instance_group.count",
        m.instance_count,
        m.instance_count + 1,
        f"GPU {_percent(m.gpu_utilization)} busy (underused below "
        f"{_percent(t.gpu_underuse_threshold)}) while requests queue "
        f"({m.pending_requests or 0:.1f} pending, queue {_ms(m.queue_seconds or 0.0)})",
        {
            "gpu_utilization": m.gpu_utilization,
            "pending_requests": m.pending_requests,
            "queue_seconds": m.queue_seconds,
            "gpu_memory_used_ratio": used,
        },
        "one more execution in parallel: queue time shrinks and throughput grows until the "
        "GPU is busy",
    )


def raise_queue_delay(m: AdvisorInput, t: AdvisorThresholds) -> Finding | None:
    """Heavy load, small batches and latency headroom: wait a little longer to batch."""
    delay, p95, batch = m.max_queue_delay_microseconds, m.p95_seconds, m.batch_size_average
    if not m.dynamic_batching or delay is None or p95 is None or batch is None:
        return None
    if m.max_batch_size is None or m.max_batch_size < 2:
        return None
    heavy = m.sweep_plateau or (m.pending_requests or 0.0) >= t.heavy_load_pending
    headroom = m.latency_budget_seconds * t.p95_headroom_fraction - p95
    if not heavy or batch >= t.small_batch_fraction * m.max_batch_size or headroom < 0:
        return None
    wanted = int(delay * t.queue_delay_step) if delay else t.first_queue_delay_microseconds
    proposed = min(wanted, delay + int(headroom * 1e6))
    if proposed <= delay:
        return None
    return Finding(
        "max_queue_delay_microseconds",
        delay,
        proposed,
        f"batches average {batch:.1f} of {m.max_batch_size} under heavy load and p95 "
        f"{_ms(p95)} has headroom under the {_ms(m.latency_budget_seconds)} budget",
        {
            "batch_size_average": batch,
            "max_batch_size": m.max_batch_size,
            "pending_requests": m.pending_requests,
            "p95_seconds": p95,
        },
        f"fuller batches and more throughput; p95 rises by at most {_ms((proposed - delay) / 1e6)}",
    )


def optimize_model(m: AdvisorInput, t: AdvisorThresholds) -> Finding | None:
    """Over budget and the time goes to the model itself on a busy GPU."""
    share, p95 = m.share(m.compute_infer_seconds), m.p95_seconds
    if share is None or p95 is None or p95 <= m.latency_budget_seconds:
        return None
    if share < t.dominant_share:
        return None
    if m.gpu_utilization is not None and m.gpu_utilization < t.gpu_busy_threshold:
        return None
    busy = "unknown" if m.gpu_utilization is None else _percent(m.gpu_utilization)
    return Finding(
        "model",
        f"compute_infer {_ms(m.compute_infer_seconds or 0.0)} ({_percent(share)} of server time)",
        "FP16/INT8 quantisation, TensorRT, operator fusion or distillation; or scale out",
        f"p95 {_ms(p95)} over the {_ms(m.latency_budget_seconds)} budget, inference is "
        f"{_percent(share)} of server time, GPU {busy} busy: configuration cannot fix this",
        {
            "compute_infer_share": share,
            "p95_seconds": p95,
            "gpu_utilization": m.gpu_utilization,
        },
        "a faster model shortens every request by its share of compute; scaling out spreads load",
    )


def reduce_io(m: AdvisorInput, t: AdvisorThresholds) -> Finding | None:
    """Copying tensors in and out takes a large share of server time."""
    if m.compute_input_seconds is None or m.compute_output_seconds is None:
        return None
    share = m.share(m.compute_input_seconds + m.compute_output_seconds)
    if share is None or share < t.io_dominant_share:
        return None
    return Finding(
        "tensor_io",
        f"compute_input+output {_percent(share)} of server time",
        "pinned or shared memory, smaller tensors, fewer copies",
        f"compute_input {_ms(m.compute_input_seconds)} and compute_output "
        f"{_ms(m.compute_output_seconds)} are {_percent(share)} of server time",
        {
            "compute_input_seconds": m.compute_input_seconds,
            "compute_output_seconds": m.compute_output_seconds,
            "io_share": share,
        },
        "server time falls by most of the copy time",
    )


def reduce_network_overhead(m: AdvisorInput, t: AdvisorThresholds) -> Finding | None:
    """Clients wait much longer than the server works: network and serialisation."""
    client, server = m.client_mean_seconds, m.request_seconds
    if client is None or server is None or client <= 0:
        return None
    gap = client - server
    if gap < t.network_gap_min_seconds or gap / client < t.network_share:
        return None
    remedies = "shared memory, co-location with clients, smaller tensors"
    if m.protocol != "grpc":
        remedies = f"gRPC, binary tensor data, {remedies}"
    return Finding(
        "transport",
        f"{_ms(gap)} outside the server ({_percent(gap / client)} of end to end)",
        remedies,
        f"clients wait {_ms(client)} on average, Triton works {_ms(server)}",
        {"client_mean_seconds": client, "server_request_seconds": server, "gap_seconds": gap},
        f"end-to-end latency falls toward the server's {_ms(server)}",
    )


def tune_queue_policy(m: AdvisorInput, t: AdvisorThresholds) -> Finding | None:
    """Triton refuses requests (REJECTED): the queue policy is too tight for the load."""
    rejected = m.failures_per_second_by_reason.get(REJECTED, 0.0)
    if rejected <= t.rejected_per_second_min:
        return None
    return Finding(
        "default_queue_policy",
        f"{rejected:.2f} REJECTED/s",
        "raise max_queue_size or default_timeout_microseconds, or add capacity",
        f"Triton rejected {rejected:.2f} requests/s: its queue is full or requests time out in it",
        {"rejected_per_second": rejected, "pending_requests": m.pending_requests},
        "requests wait instead of failing (or capacity keeps the queue short)",
    )


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of the advisor's table."""

    action: Action
    severity: Severity
    config_change: bool
    check: Check


RULES: tuple[Rule, ...] = (
    Rule(Action.REMOVE_INSTANCE, Severity.TICKET, True, remove_instance),
    Rule(Action.LOWER_QUEUE_DELAY, Severity.TICKET, True, lower_queue_delay),
    Rule(Action.ENABLE_DYNAMIC_BATCHING, Severity.INFO, True, enable_dynamic_batching),
    Rule(Action.ADD_INSTANCE, Severity.INFO, True, add_instance),
    Rule(Action.RAISE_QUEUE_DELAY, Severity.INFO, True, raise_queue_delay),
    Rule(Action.OPTIMIZE_MODEL, Severity.TICKET, False, optimize_model),
    Rule(Action.REDUCE_IO, Severity.INFO, False, reduce_io),
    Rule(Action.REDUCE_NETWORK_OVERHEAD, Severity.INFO, False, reduce_network_overhead),
    Rule(Action.TUNE_QUEUE_POLICY, Severity.TICKET, False, tune_queue_policy),
)
"""Every rule, highest priority first."""
