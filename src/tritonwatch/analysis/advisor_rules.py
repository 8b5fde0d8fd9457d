"""The advisor's rules (docs/design.md §7's table), each a small pure function of a window.

A rule returns a :class:`Finding` (what to change, from what to what, why, the
numbers, the expected effect) or None. :data:`RULES` is the one table of rules in
priority order, with each rule's action, severity and whether it changes the model's
configuration; :func:`tritonwatch.analysis.advisor.advise` picks from it. The order
puts safety first (a full KV cache, GPU memory), then the SLO (first tokens late, tokens
slow, queue delay over budget), then throughput. The generative rules come first and stay
silent for a model without LLM serving numbers.
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
    large share of its server time without anyone waiting for an instance.

    Only the queue time beyond ``max_queue_delay_microseconds`` counts against the
    budget: the batcher holds a request that long by design (a 2 ms delay with
    preferred batches reads as ~2 ms of queue on an idle model), and no instance
    added would shorten that wait."""
    queue_share = m.share(m.queue_seconds)
    batching_wait = (m.max_queue_delay_microseconds or 0) / 1e6 if m.dynamic_batching else 0.0
    long_enough = (
        m.queue_seconds is not None
        and m.queue_seconds - batching_wait >= t.queue_budget_share * m.latency_budget_seconds
    )
    return (m.pending_requests is not None and m.pending_requests >= t.queued_requests_min) or (
        queue_share is not None and queue_share >= t.queueing_share and long_enough
    )


def host_cpu_saturated(m: AdvisorInput, t: AdvisorThresholds) -> bool:
    """The host's CPU is saturated: requests queue for the CPU itself, so another
    instance would only share it and a shorter batching delay would not run them sooner."""
    cpu = m.host_cpu_utilization
    return cpu is not None and cpu >= t.cpu_saturated_threshold


def cannot_batch_more(m: AdvisorInput) -> bool:
    """Batching is impossible (``max_batch_size`` 0 or 1) or its batches are already
    full: a longer delay or dynamic batching buys nothing, only more instances do."""
    if m.max_batch_size is None or m.max_batch_size < 2:
        return m.max_batch_size is not None
    batch = m.batch_size_average
    return bool(m.dynamic_batching) and batch is not None and batch >= FULL_BATCH * m.max_batch_size


FULL_BATCH = 0.9
"""An average batch of at least this share of ``max_batch_size`` is full."""


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
    return _idle_streaming_instance(m, t, m.instance_count)


def _idle_streaming_instance(m: AdvisorInput, t: AdvisorThresholds, count: int) -> Finding | None:
    """A generative model's GPU idles with no sequence waiting: an instance too many.

    Only for streaming models: their engines report waiting and running sequences where
    Triton's pending count may be missing (a vLLM server), and an LLM instance holds a
    whole KV cache, so one less (or a smaller GPU) is worth saying. A plain model's idle
    spare instance costs little and keeps its headroom for the next burst.
    """
    queued = m.queued_requests
    if not m.streaming or m.gpu_utilization is None or queued is None:
        return None
    if m.gpu_utilization >= t.gpu_underuse_threshold or queued >= t.waiting_requests_min:
        return None
    running = "" if m.requests_running is None else f", {m.requests_running:.1f} running"
    return Finding(
        "instance_group.count",
        count,
        count - 1,
        f"GPU {_percent(m.gpu_utilization)} busy (underused below "
        f"{_percent(t.gpu_underuse_threshold)}) with {queued:.1f} requests waiting{running}",
        {
            "gpu_utilization": m.gpu_utilization,
            "queued_requests": queued,
            "requests_running": m.requests_running,
            "instance_count": count,
        },
        "the same service with one instance less, or a smaller GPU: its memory and KV cache "
        "back for other work",
    )


def lower_queue_delay(m: AdvisorInput, t: AdvisorThresholds) -> Finding | None:
    """p95 over budget because requests wait for batches to fill."""
    delay, p95 = m.max_queue_delay_microseconds, m.p95_seconds
    queue_share = m.share(m.queue_seconds)
    if not m.dynamic_batching or not delay or p95 is None or queue_share is None:
        return None
    if host_cpu_saturated(m, t):  # the queue is the host's: batching less would not help
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
    """GPU underused while requests queue, with memory for one more instance; for
    ``KIND_CPU`` instances, the host's spare CPU instead (:func:`add_cpu_instance`)."""
    if host_cpu_saturated(m, t):
        return None
    if m.instance_kind == "KIND_CPU":
        return add_cpu_instance(m, t)
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


def add_cpu_instance(m: AdvisorInput, t: AdvisorThresholds) -> Finding | None:
    """``KIND_CPU`` instances: requests queue, the queue is the bulk of the server's
    time, batching cannot take more, and the host's CPU has room.

    An instance that burns CPU raises ``nv_cpu_utilization`` as it works; busy instances
    on a host with spare CPU are waiting instead (a sleep, I/O, a remote call, a GIL-free
    wait in the backend), so one more runs beside them and takes its share of the queue.
    """
    count, cpu, queue_share = m.instance_count, m.host_cpu_utilization, m.share(m.queue_seconds)
    if count is None or cpu is None or queue_share is None or cpu >= t.cpu_spare_threshold:
        return None
    if not requests_queue(m, t) or queue_share < t.dominant_share or not cannot_batch_more(m):
        return None
    batching = "cannot batch" if (m.max_batch_size or 0) < 2 else "batches are full"
    return Finding(
        "instance_group.count",
        count,
        count + 1,
        f"requests queue {_ms(m.queue_seconds or 0.0)} ({_percent(queue_share)} of server "
        f"time) behind {count} KIND_CPU instance{'s' if count > 1 else ''} that {batching}, "
        f"and the host CPU is {_percent(cpu)} busy (spare below {_percent(t.cpu_spare_threshold)})",
        {
            "queue_seconds": m.queue_seconds,
            "queue_share": queue_share,
            "pending_requests": m.pending_requests,
            "host_cpu_utilization": cpu,
            "instance_count": count,
        },
        "one more execution in parallel on the idle CPU: queue time shrinks and throughput "
        "grows until the host's CPU is busy",
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
    if m.python_backend:  # Python code: profile it (advice_blocked says so), no TensorRT
        return None
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
    if m.streaming:  # a stream outlasts Triton's request time by the model's own streaming
        return None
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


SEQUENCE_LIMIT_STEP = 0.75
"""KV-cache pressure and slow tokens propose about three quarters of the current sequence
limit: enough to relieve the cache or the decode step, small enough a step to measure
(one change at a time)."""


def _sequence_limit(m: AdvisorInput) -> str:
    """The knob that caps concurrent sequences, by the name the backend gives it."""
    if m.llm_backend == "tensorrt_llm":
        return "max_batch_size / max_num_tokens"
    if m.llm_backend == "vllm":
        return "max_num_seqs"
    return "max concurrent sequences"


def _lowered(m: AdvisorInput, factor: float) -> tuple[int | str, int | str]:
    """current → proposed for the sequence limit: the engine's max when its page prints
    it, else the sequences it runs now (the limit is at least that)."""
    if m.requests_max is not None and m.requests_max >= 1:
        return int(m.requests_max), max(1, round(m.requests_max * factor))
    if m.requests_running is not None and m.requests_running >= 1:
        return f"≥ {m.requests_running:.0f} (running now)", max(
            1, round(m.requests_running * factor)
        )
    return "unknown", f"about ×{factor:g} of the current value"


def kv_cache_full(m: AdvisorInput, t: AdvisorThresholds) -> bool:
    """KV-cache usage at or over the full line."""
    return m.kv_cache_usage_ratio is not None and m.kv_cache_usage_ratio >= t.kv_cache_full_ratio


def kv_pressure(m: AdvisorInput, t: AdvisorThresholds) -> bool:
    """The KV cache is full and sequences pay for it: preempted, paused or kept waiting."""
    preempting = (m.preemptions_per_second or 0.0) > t.preemptions_per_second_min
    waiting = m.requests_waiting is not None and m.requests_waiting >= t.waiting_requests_min
    paused = (m.paused_requests or 0.0) > 0
    return kv_cache_full(m, t) and (preempting or waiting or paused)


def reduce_kv_pressure(m: AdvisorInput, t: AdvisorThresholds) -> Finding | None:
    """Under KV-cache pressure, fewer concurrent sequences (:func:`kv_pressure`)."""
    kv = m.kv_cache_usage_ratio
    if kv is None or not kv_pressure(m, t):
        return None
    current, proposed = _lowered(m, SEQUENCE_LIMIT_STEP)
    pauses = f", {m.paused_requests:.1f} paused" if m.paused_requests is not None else ""
    return Finding(
        _sequence_limit(m),
        current,
        proposed,
        f"KV cache {_percent(kv)} used (full from {_percent(t.kv_cache_full_ratio)}) with "
        f"{m.preemptions_per_second or 0.0:.2f} preemptions/s and "
        f"{m.requests_waiting or 0.0:.1f} sequences waiting{pauses}",
        {
            "kv_cache_usage_ratio": kv,
            "preemptions_per_second": m.preemptions_per_second,
            "requests_waiting": m.requests_waiting,
            "requests_running": m.requests_running,
            "paused_requests": m.paused_requests,
        },
        "fewer sequences share the cache: no preempted sequence recomputes its prompt, "
        "each runs to the end; without lowering the limit, KV-cache quantisation (FP8/INT8 "
        "KV) or more GPUs (tensor parallelism) give the cache more room",
    )


def slow_first_tokens(m: AdvisorInput) -> bool:
    """First tokens break their SLO: the TTFT SLO burns, or the server's own mean TTFT
    over the window is already over the TTFT budget (where no canary streams)."""
    server, budget = m.server_ttft_mean_seconds, m.ttft_budget_seconds
    return m.ttft_burning or (server is not None and budget is not None and server > budget)


def scale_out_prefill(m: AdvisorInput, t: AdvisorThresholds) -> Finding | None:
    """First tokens are late because prompts wait to be admitted: prefill is the queue.

    Silent while the KV cache is full: then sequences wait for cache blocks, not for
    prefill, and :func:`reduce_kv_pressure` names the cause.
    """
    waiting = m.requests_waiting
    if not slow_first_tokens(m) or waiting is None or waiting < t.waiting_requests_min:
        return None
    if kv_cache_full(m, t):
        return None
    ttft = m.ttft_p95_seconds if m.ttft_p95_seconds is not None else m.server_ttft_mean_seconds
    measured = "unknown" if ttft is None else _ms(ttft)
    which = "p95" if m.ttft_p95_seconds is not None else "server mean"
    budget = "no budget" if m.ttft_budget_seconds is None else _ms(m.ttft_budget_seconds)
    return Finding(
        "prefill_capacity",
        f"TTFT {which} {measured}, {waiting:.1f} sequences waiting",
        "scale out (more replicas), chunked prefill (vLLM enable_chunked_prefill, "
        "TensorRT-LLM enable_chunked_context), shorter prompts",
        f"time to first token {which} {measured} against the {budget} TTFT budget "
        f"while {waiting:.1f} sequences wait for admission",
        {
            "ttft_p95_seconds": m.ttft_p95_seconds,
            "server_ttft_mean_seconds": m.server_ttft_mean_seconds,
            "ttft_budget_seconds": m.ttft_budget_seconds,
            "requests_waiting": waiting,
            "requests_running": m.requests_running,
        },
        "prompts are admitted sooner: TTFT falls with the waiting queue; chunked prefill "
        "also keeps long prompts from stalling running sequences",
    )


def lower_max_sequences(m: AdvisorInput, t: AdvisorThresholds) -> Finding | None:
    """Tokens come slowly because the engine decodes too many sequences per step."""
    running = m.requests_running
    if not m.itl_burning or running is None:
        return None
    if m.requests_max is not None and m.requests_max >= 1:
        if running < t.running_high_share * m.requests_max:
            return None
        full = f"{running:.1f} of {m.requests_max:.0f} running"
    elif running > 1:
        full = f"{running:.1f} running (limit unknown)"
    else:
        return None
    current, proposed = _lowered(m, SEQUENCE_LIMIT_STEP)
    itl = "unknown" if m.itl_p95_seconds is None else _ms(m.itl_p95_seconds)
    budget = "its" if m.itl_budget_seconds is None else f"the {_ms(m.itl_budget_seconds)}"
    return Finding(
        _sequence_limit(m),
        current,
        proposed,
        f"the ITL SLO burns (gap p95 {itl}, over {budget} budget) with {full}",
        {
            "itl_p95_seconds": m.itl_p95_seconds,
            "itl_budget_seconds": m.itl_budget_seconds,
            "requests_running": running,
            "requests_max": m.requests_max,
        },
        "each decode step serves fewer sequences and finishes sooner: gaps between tokens "
        "shrink, throughput in tokens/s falls a little",
    )


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of the advisor's table."""

    action: Action
    severity: Severity
    config_change: bool
    check: Check


RULES: tuple[Rule, ...] = (
    Rule(Action.REDUCE_KV_PRESSURE, Severity.TICKET, True, reduce_kv_pressure),
    Rule(Action.SCALE_OUT_PREFILL, Severity.INFO, False, scale_out_prefill),
    Rule(Action.LOWER_MAX_SEQUENCES, Severity.TICKET, True, lower_max_sequences),
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
