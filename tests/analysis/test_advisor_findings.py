"""Each advisor rule's whole finding: what to change, from what to what, the reason, the
numbers behind it and the expected effect, word for word (a person acts on these; the
boundaries are test_advisor_rules.py's)."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any

import pytest
from test_advisor_rules import BASE, IDLE_STREAM, LIMITS

from tritonwatch.analysis.advisor_records import AdvisorThresholds
from tritonwatch.analysis.advisor_rules import (
    Check,
    Finding,
    add_instance,
    enable_dynamic_batching,
    lower_max_sequences,
    lower_queue_delay,
    optimize_model,
    raise_queue_delay,
    reduce_io,
    reduce_kv_pressure,
    reduce_network_overhead,
    remove_instance,
    scale_out_prefill,
    tune_queue_policy,
)

ADD_CPU = {
    "instance_kind": "KIND_CPU",
    "host_cpu_utilization": 0.3,
    "queue_seconds": 0.006,
}
CPU_EFFECT = (
    "one more execution in parallel on the idle CPU: queue time shrinks and throughput "
    "grows until the host's CPU is busy"
)
SEQUENCES_EFFECT = (
    "each decode step serves fewer sequences and finishes sooner: gaps between tokens "
    "shrink, throughput in tokens/s falls a little"
)
KV_EFFECT = (
    "fewer sequences share the cache: no preempted sequence recomputes its prompt, each "
    "runs to the end; without lowering the limit, KV-cache quantisation (FP8/INT8 KV) or "
    "more GPUs (tensor parallelism) give the cache more room"
)
PREFILL_PROPOSED = (
    "scale out (more replicas), chunked prefill (vLLM enable_chunked_prefill, "
    "TensorRT-LLM enable_chunked_context), shorter prompts"
)
PREFILL_EFFECT = (
    "prompts are admitted sooner: TTFT falls with the waiting queue; chunked prefill also "
    "keeps long prompts from stalling running sequences"
)
MODEL_PROPOSED = "FP16/INT8 quantisation, TensorRT, operator fusion or distillation; or scale out"
MODEL_EFFECT = (
    "a faster model shortens every request by its share of compute; scaling out spreads load"
)
NETWORK_CURRENT = "20.0 ms outside the server (67 % of end to end)"
NETWORK_EVIDENCE = {
    "client_mean_seconds": 0.03,
    "server_request_seconds": 0.01,
    "gap_seconds": 0.03 - 0.01,
}
NETWORK_EFFECT = "end-to-end latency falls toward the server's 10.0 ms"
KV_PRESSURE = {
    "streaming": True,
    "llm_backend": "vllm",
    "kv_cache_usage_ratio": 0.97,
    "preemptions_per_second": 0.5,
    "requests_waiting": 3.0,
    "requests_running": 40.0,
    "requests_max": 64.0,
}

FINDINGS: dict[str, tuple[Check, dict[str, Any], Finding]] = {
    "remove_instance: GPU memory scarce": (
        remove_instance,
        {"gpu_memory_used_bytes": 92.0, "instance_count": 3},
        Finding(
            "instance_group.count",
            3,
            2,
            "GPU memory is 92 % used (scarce from 90 %)",
            {"gpu_memory_used_ratio": 0.92, "instance_count": 3},
            "frees about 1/3 of the model's GPU memory and the risk of out-of-memory "
            "failures when anything else loads",
        ),
    ),
    "remove_instance: the last instance bought nothing": (
        remove_instance,
        {"last_change_added_instance": True, "throughput_before_last_change": 19.5},
        Finding(
            "instance_group.count",
            2,
            1,
            "the last added instance changed throughput by +2.6% (19.5/s → 20.0/s)",
            {
                "throughput_before": 19.5,
                "throughput_after": 20.0,
                "gain": 20.0 / 19.5 - 1.0,
            },
            "the same throughput with one instance less: its memory back, less contention",
        ),
    ),
    "remove_instance: an idle streaming model": (
        remove_instance,
        {**IDLE_STREAM, "requests_waiting": 0.5},
        Finding(
            "instance_group.count",
            2,
            1,
            "GPU 20 % busy (underused below 50 %) with 0.5 requests waiting",
            {
                "gpu_utilization": 0.2,
                "queued_requests": 0.5,
                "requests_running": None,
                "instance_count": 2,
            },
            "the same service with one instance less, or a smaller GPU: its memory and KV "
            "cache back for other work",
        ),
    ),
    "lower_queue_delay": (
        lower_queue_delay,
        {
            "p95_seconds": 0.06,
            "queue_seconds": 0.006,
            "max_queue_delay_microseconds": 3000,
        },
        Finding(
            "max_queue_delay_microseconds",
            3000,
            1500,
            "p95 60.0 ms is over the 50.0 ms budget and queue time is 60 % of server time",
            {
                "p95_seconds": 0.06,
                "latency_budget_seconds": 0.05,
                "queue_seconds": 0.006,
                "queue_share": 0.6,
            },
            "requests wait up to 1.5 ms less for a batch to fill; p95 falls by about as "
            "much, batches get smaller",
        ),
    ),
    "enable_dynamic_batching": (
        enable_dynamic_batching,
        {"dynamic_batching": False, "pending_requests": 3.0},
        Finding(
            "dynamic_batching",
            "disabled",
            "enabled",
            "3.0 requests in flight on average, max_batch_size 8, but every execution runs "
            "one request",
            {"concurrency": 3.0, "max_batch_size": 8},
            "requests that arrive together run as one batch: more throughput from the same "
            "GPU time, less queueing under load",
        ),
    ),
    "add_instance": (
        add_instance,
        {"gpu_utilization": 0.3, "pending_requests": 2.5},
        Finding(
            "instance_group.count",
            2,
            3,
            "GPU 30 % busy (underused below 50 %) while requests queue (2.5 pending, queue 1.0 ms)",
            {
                "gpu_utilization": 0.3,
                "pending_requests": 2.5,
                "queue_seconds": 0.001,
                "gpu_memory_used_ratio": 0.5,
            },
            "one more execution in parallel: queue time shrinks and throughput grows until "
            "the GPU is busy",
        ),
    ),
    "add_instance: one KIND_CPU instance that cannot batch": (
        add_instance,
        {**ADD_CPU, "max_batch_size": 1, "pending_requests": 2.0, "instance_count": 1},
        Finding(
            "instance_group.count",
            1,
            2,
            "requests queue 6.0 ms (60 % of server time) behind 1 KIND_CPU instance that "
            "cannot batch, and the host CPU is 30 % busy (spare below 50 %)",
            {
                "queue_seconds": 0.006,
                "queue_share": 0.6,
                "pending_requests": 2.0,
                "host_cpu_utilization": 0.3,
                "instance_count": 1,
            },
            CPU_EFFECT,
        ),
    ),
    "add_instance: KIND_CPU instances with full batches": (
        add_instance,
        {**ADD_CPU, "batch_size_average": 7.5, "pending_requests": 2.0},
        Finding(
            "instance_group.count",
            2,
            3,
            "requests queue 6.0 ms (60 % of server time) behind 2 KIND_CPU instances that "
            "batches are full, and the host CPU is 30 % busy (spare below 50 %)",
            {
                "queue_seconds": 0.006,
                "queue_share": 0.6,
                "pending_requests": 2.0,
                "host_cpu_utilization": 0.3,
                "instance_count": 2,
            },
            CPU_EFFECT,
        ),
    ),
    "raise_queue_delay": (
        raise_queue_delay,
        {"pending_requests": 6.0, "max_queue_delay_microseconds": 500},
        Finding(
            "max_queue_delay_microseconds",
            500,
            1000,
            "batches average 1.0 of 8 under heavy load and p95 20.0 ms has headroom under "
            "the 50.0 ms budget",
            {
                "batch_size_average": 1.0,
                "max_batch_size": 8,
                "pending_requests": 6.0,
                "p95_seconds": 0.02,
            },
            "fuller batches and more throughput; p95 rises by at most 0.5 ms",
        ),
    ),
    "optimize_model": (
        optimize_model,
        {"p95_seconds": 0.06, "gpu_utilization": 0.85, "compute_infer_seconds": 0.007},
        Finding(
            "model",
            "compute_infer 7.0 ms (70 % of server time)",
            MODEL_PROPOSED,
            "p95 60.0 ms over the 50.0 ms budget, inference is 70 % of server time, GPU "
            "85 % busy: configuration cannot fix this",
            {"compute_infer_share": 0.7, "p95_seconds": 0.06, "gpu_utilization": 0.85},
            MODEL_EFFECT,
        ),
    ),
    "optimize_model: GPU utilisation unknown": (
        optimize_model,
        {"p95_seconds": 0.06, "gpu_utilization": None, "compute_infer_seconds": 0.007},
        Finding(
            "model",
            "compute_infer 7.0 ms (70 % of server time)",
            MODEL_PROPOSED,
            "p95 60.0 ms over the 50.0 ms budget, inference is 70 % of server time, GPU "
            "unknown busy: configuration cannot fix this",
            {"compute_infer_share": 0.7, "p95_seconds": 0.06, "gpu_utilization": None},
            MODEL_EFFECT,
        ),
    ),
    "reduce_io": (
        reduce_io,
        {"compute_input_seconds": 0.003, "compute_output_seconds": 0.002},
        Finding(
            "tensor_io",
            "compute_input+output 50 % of server time",
            "pinned or shared memory, smaller tensors, fewer copies",
            "compute_input 3.0 ms and compute_output 2.0 ms are 50 % of server time",
            {
                "compute_input_seconds": 0.003,
                "compute_output_seconds": 0.002,
                "io_share": 0.5,
            },
            "server time falls by most of the copy time",
        ),
    ),
    "reduce_network_overhead: HTTP": (
        reduce_network_overhead,
        {"client_mean_seconds": 0.03, "protocol": "http"},
        Finding(
            "transport",
            NETWORK_CURRENT,
            "gRPC, binary tensor data, shared memory, co-location with clients, smaller tensors",
            "clients wait 30.0 ms on average, Triton works 10.0 ms",
            NETWORK_EVIDENCE,
            NETWORK_EFFECT,
        ),
    ),
    "reduce_network_overhead: gRPC": (
        reduce_network_overhead,
        {"client_mean_seconds": 0.03, "protocol": "grpc"},
        Finding(
            "transport",
            NETWORK_CURRENT,
            "shared memory, co-location with clients, smaller tensors",
            "clients wait 30.0 ms on average, Triton works 10.0 ms",
            NETWORK_EVIDENCE,
            NETWORK_EFFECT,
        ),
    ),
    "tune_queue_policy": (
        tune_queue_policy,
        {
            "failures_per_second_by_reason": MappingProxyType({"REJECTED": 1.25}),
            "pending_requests": 4.0,
        },
        Finding(
            "default_queue_policy",
            "1.25 REJECTED/s",
            "raise max_queue_size or default_timeout_microseconds, or add capacity",
            "Triton rejected 1.25 requests/s: its queue is full or requests time out in it",
            {"rejected_per_second": 1.25, "pending_requests": 4.0},
            "requests wait instead of failing (or capacity keeps the queue short)",
        ),
    ),
    "lower_max_sequences: TensorRT-LLM, limit unknown": (
        lower_max_sequences,
        {"itl_burning": True, "requests_running": 3.0, "llm_backend": "tensorrt_llm"},
        Finding(
            "max_batch_size / max_num_tokens",
            "≥ 3 (running now)",
            2,
            "the ITL SLO burns (gap p95 unknown, over its budget) with 3.0 running (limit unknown)",
            {
                "itl_p95_seconds": None,
                "itl_budget_seconds": None,
                "requests_running": 3.0,
                "requests_max": None,
            },
            SEQUENCES_EFFECT,
        ),
    ),
    "lower_max_sequences: vLLM, 60 of 64 running": (
        lower_max_sequences,
        {
            "llm_backend": "vllm",
            "itl_burning": True,
            "itl_p95_seconds": 0.08,
            "itl_budget_seconds": 0.05,
            "requests_running": 60.0,
            "requests_max": 64.0,
        },
        Finding(
            "max_num_seqs",
            64,
            48,
            "the ITL SLO burns (gap p95 80.0 ms, over the 50.0 ms budget) with 60.0 of 64 running",
            {
                "itl_p95_seconds": 0.08,
                "itl_budget_seconds": 0.05,
                "requests_running": 60.0,
                "requests_max": 64.0,
            },
            SEQUENCES_EFFECT,
        ),
    ),
    "reduce_kv_pressure: vLLM": (
        reduce_kv_pressure,
        KV_PRESSURE,
        Finding(
            "max_num_seqs",
            64,
            48,
            "KV cache 97 % used (full from 90 %) with 0.50 preemptions/s and 3.0 sequences waiting",
            {
                "kv_cache_usage_ratio": 0.97,
                "preemptions_per_second": 0.5,
                "requests_waiting": 3.0,
                "requests_running": 40.0,
                "paused_requests": None,
            },
            KV_EFFECT,
        ),
    ),
    "reduce_kv_pressure: backend and limits unknown, sequences paused": (
        reduce_kv_pressure,
        {
            **KV_PRESSURE,
            "llm_backend": None,
            "requests_max": None,
            "requests_running": None,
            "preemptions_per_second": None,
            "paused_requests": 1.5,
        },
        Finding(
            "max concurrent sequences",
            "unknown",
            "about ×0.75 of the current value",
            "KV cache 97 % used (full from 90 %) with 0.00 preemptions/s and 3.0 sequences "
            "waiting, 1.5 paused",
            {
                "kv_cache_usage_ratio": 0.97,
                "preemptions_per_second": None,
                "requests_waiting": 3.0,
                "requests_running": None,
                "paused_requests": 1.5,
            },
            KV_EFFECT,
        ),
    ),
    "scale_out_prefill: the canary's TTFT p95": (
        scale_out_prefill,
        {
            "ttft_burning": True,
            "ttft_p95_seconds": 1.2,
            "ttft_budget_seconds": 0.5,
            "requests_waiting": 6.0,
            "requests_running": 4.0,
        },
        Finding(
            "prefill_capacity",
            "TTFT p95 1200.0 ms, 6.0 sequences waiting",
            PREFILL_PROPOSED,
            "time to first token p95 1200.0 ms against the 500.0 ms TTFT budget while 6.0 "
            "sequences wait for admission",
            {
                "ttft_p95_seconds": 1.2,
                "server_ttft_mean_seconds": None,
                "ttft_budget_seconds": 0.5,
                "requests_waiting": 6.0,
                "requests_running": 4.0,
            },
            PREFILL_EFFECT,
        ),
    ),
    "scale_out_prefill: the server's mean TTFT, no TTFT budget": (
        scale_out_prefill,
        {
            "ttft_burning": True,
            "server_ttft_mean_seconds": 0.8,
            "requests_waiting": 2.0,
        },
        Finding(
            "prefill_capacity",
            "TTFT server mean 800.0 ms, 2.0 sequences waiting",
            PREFILL_PROPOSED,
            "time to first token server mean 800.0 ms against the no budget TTFT budget "
            "while 2.0 sequences wait for admission",
            {
                "ttft_p95_seconds": None,
                "server_ttft_mean_seconds": 0.8,
                "ttft_budget_seconds": None,
                "requests_waiting": 2.0,
                "requests_running": None,
            },
            PREFILL_EFFECT,
        ),
    ),
    "scale_out_prefill: TTFT unmeasured": (
        scale_out_prefill,
        {"ttft_burning": True, "requests_waiting": 2.0},
        Finding(
            "prefill_capacity",
            "TTFT server mean unknown, 2.0 sequences waiting",
            PREFILL_PROPOSED,
            "time to first token server mean unknown against the no budget TTFT budget "
            "while 2.0 sequences wait for admission",
            {
                "ttft_p95_seconds": None,
                "server_ttft_mean_seconds": None,
                "ttft_budget_seconds": None,
                "requests_waiting": 2.0,
                "requests_running": None,
            },
            PREFILL_EFFECT,
        ),
    ),
}


@pytest.mark.parametrize(("rule", "changes", "expected"), FINDINGS.values(), ids=FINDINGS.keys())
def test_each_rule_says_what_to_change_why_and_its_numbers(
    rule: Check, changes: dict[str, Any], expected: Finding
) -> None:
    """Breaks if a rule's parameter, values, reason, evidence or expected effect changes:
    each is what a person reads before touching a production model's configuration."""
    assert rule(replace(BASE, **changes), LIMITS) == expected


@pytest.mark.parametrize(
    ("known", "limit"),
    [
        ({"requests_max": 64.0}, (64, 48)),
        ({"requests_max": 1.0}, (1, 1)),  # a limit of one stays one
        ({"requests_max": None, "requests_running": 1.0}, ("≥ 1 (running now)", 1)),
        ({"requests_max": 0.5, "requests_running": 3.0}, ("≥ 3 (running now)", 2)),
        (
            {"requests_max": None, "requests_running": 0.5},
            ("unknown", "about ×0.75 of the current value"),
        ),
    ],
)
def test_the_sequence_limit_is_lowered_by_a_quarter_never_below_one(
    known: dict[str, Any], limit: tuple[int | str, int | str]
) -> None:
    """Breaks if the lowered limit reads the engine's maximum below one as known, skips a
    single running sequence, or proposes zero sequences (or more than the current one)."""
    finding = reduce_kv_pressure(replace(BASE, **{**KV_PRESSURE, **known}), LIMITS)
    assert finding is not None
    assert (finding.current, finding.proposed) == limit


def test_kind_cpu_instances_that_batch_two_have_full_batches_not_none() -> None:
    """Breaks if instances with ``max_batch_size`` 2 are said to be unable to batch."""
    full = {**ADD_CPU, "max_batch_size": 2, "batch_size_average": 1.8, "pending_requests": 2.0}
    finding = add_instance(replace(BASE, **full), LIMITS)
    assert finding is not None
    assert "behind 2 KIND_CPU instances that batches are full," in finding.reason


def test_an_unknown_queue_number_reads_as_zero_in_the_add_instance_reason() -> None:
    """Breaks if a pending count or a queue time nobody reported is printed as anything
    but zero (requests queue by the other number)."""
    queued = {"gpu_utilization": 0.2, "queue_seconds": 0.006, "pending_requests": None}
    no_pending = add_instance(replace(BASE, **queued), LIMITS)
    pending = {"gpu_utilization": 0.2, "queue_seconds": None, "pending_requests": 2.0}
    no_queue_time = add_instance(replace(BASE, **pending), LIMITS)
    assert no_pending is not None
    assert no_queue_time is not None
    assert no_pending.reason.endswith("while requests queue (0.0 pending, queue 6.0 ms)")
    assert no_queue_time.reason.endswith("while requests queue (2.0 pending, queue 0.0 ms)")


def test_a_kind_cpu_queue_of_zero_reads_as_zero_where_any_share_dominates() -> None:
    """Breaks if a queue time of 0 (possible once ``dominant_share`` is configured to 0)
    is printed as anything but 0.0 ms."""
    window = replace(
        BASE,
        instance_kind="KIND_CPU",
        host_cpu_utilization=0.3,
        max_batch_size=1,
        pending_requests=2.0,
        queue_seconds=0.0,
    )
    finding = add_instance(window, AdvisorThresholds(dominant_share=0.0))
    assert finding is not None
    assert finding.reason.startswith("requests queue 0.0 ms (0 % of server time) behind 2")


def test_delay_effects_are_in_milliseconds_to_a_tenth_however_long() -> None:
    """Breaks if a queue delay's expected effect is not the microseconds it moves, as
    milliseconds: 100 s less (a 200 s delay halved) or more (a 100 s delay doubled)."""
    over = {
        "p95_seconds": 400.0,
        "queue_seconds": 0.006,
        "max_queue_delay_microseconds": 200_000_000,
    }
    lowered = lower_queue_delay(replace(BASE, **over), LIMITS)
    assert lowered is not None
    assert lowered.expected_effect.startswith("requests wait up to 100000.0 ms less")
    heavy = {
        "latency_budget_seconds": 200.0,
        "pending_requests": 6.0,
        "max_queue_delay_microseconds": 100_000_000,
    }
    raised = raise_queue_delay(replace(BASE, **heavy), LIMITS)
    assert raised is not None
    assert raised.expected_effect.endswith("p95 rises by at most 100000.0 ms")


def test_zero_numbers_read_as_zero_in_the_model_and_kv_findings() -> None:
    """Breaks if a compute time of 0 (possible once ``dominant_share`` is configured to 0)
    or an unknown count of waiting sequences is printed as anything but 0."""
    idle_compute = {"p95_seconds": 0.06, "gpu_utilization": 0.85, "compute_infer_seconds": 0.0}
    model = optimize_model(replace(BASE, **idle_compute), AdvisorThresholds(dominant_share=0.0))
    assert model is not None
    assert model.current == "compute_infer 0.0 ms (0 % of server time)"
    preempting = {**KV_PRESSURE, "requests_waiting": None}
    kv = reduce_kv_pressure(replace(BASE, **preempting), LIMITS)
    assert kv is not None
    assert kv.reason.endswith("with 0.50 preemptions/s and 0.0 sequences waiting")
