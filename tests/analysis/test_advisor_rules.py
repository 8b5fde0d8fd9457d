"""Each advisor rule at its boundary: on the line one way, just across it the other."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any

import pytest

from tritonwatch.analysis.advisor import advise
from tritonwatch.analysis.advisor_records import Action, AdvisorInput, AdvisorThresholds
from tritonwatch.analysis.advisor_rules import (
    RULES,
    Check,
    add_instance,
    enable_dynamic_batching,
    gpu_underused,
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
from tritonwatch.analysis.slo import Severity

LIMITS = AdvisorThresholds()
BASE = AdvisorInput(
    target="t",
    model="m",
    latency_budget_seconds=0.050,
    p95_seconds=0.020,
    request_seconds=0.010,
    queue_seconds=0.001,
    compute_input_seconds=0.0005,
    compute_infer_seconds=0.008,
    compute_output_seconds=0.0005,
    requests_per_second=20.0,
    batch_size_average=1.0,
    max_batch_size=8,
    dynamic_batching=True,
    max_queue_delay_microseconds=100,
    instance_count=2,
    gpu_utilization=0.6,
    gpu_memory_used_bytes=50.0,
    gpu_memory_total_bytes=100.0,
    pending_requests=0.0,
)
TINY = 1e-9
FULL = {"kv_cache_usage_ratio": 0.95}
TTFT_BURNS = {"ttft_burning": True, "requests_waiting": 2.0}
ITL_BURNS = {"itl_burning": True, "requests_max": 10.0}
IDLE_STREAM = {"streaming": True, "gpu_utilization": 0.2, "pending_requests": None}

# (rule, changes that make it fire, changes at/over the line that keep it silent)
BOUNDARIES: list[tuple[Check, dict[str, Any], dict[str, Any]]] = [
    (remove_instance, {"gpu_memory_used_bytes": 90.0}, {"gpu_memory_used_bytes": 90.0 - TINY}),
    (
        remove_instance,
        {"gpu_memory_used_bytes": 90.0},
        {"gpu_memory_used_bytes": 90.0, "instance_count": 1},
    ),
    (
        remove_instance,
        {"last_change_added_instance": True, "throughput_before_last_change": 19.05},
        {"last_change_added_instance": True, "throughput_before_last_change": 19.0},
    ),
    (
        lower_queue_delay,
        {"p95_seconds": 0.050 + TINY, "queue_seconds": 0.005},
        {"p95_seconds": 0.050, "queue_seconds": 0.005},
    ),
    (
        lower_queue_delay,
        {"p95_seconds": 0.06, "queue_seconds": 0.005},
        {"p95_seconds": 0.06, "queue_seconds": 0.005 - TINY},
    ),
    (
        lower_queue_delay,
        {"p95_seconds": 0.06, "queue_seconds": 0.005},
        {"p95_seconds": 0.06, "queue_seconds": 0.005, "max_queue_delay_microseconds": 0},
    ),
    (
        enable_dynamic_batching,
        {"dynamic_batching": False, "pending_requests": 2.0},
        {"dynamic_batching": False, "pending_requests": 1.9, "requests_per_second": 19.0},
    ),
    (
        enable_dynamic_batching,
        {"dynamic_batching": False, "requests_per_second": 200.0},
        {"dynamic_batching": False, "requests_per_second": 200.0, "max_batch_size": 1},
    ),
    (
        add_instance,
        {"gpu_utilization": 0.5 - TINY, "pending_requests": 1.0},
        {"gpu_utilization": 0.5, "pending_requests": 1.0},
    ),
    (
        add_instance,
        {"gpu_utilization": 0.2, "queue_seconds": 0.0051 + TINY, "request_seconds": 0.025},
        {"gpu_utilization": 0.2, "queue_seconds": 0.0051 - TINY, "request_seconds": 0.025},
    ),  # queue beyond the 100 µs batching delay ≥ 10 % of the budget (20 % of server time)
    (
        add_instance,
        {"gpu_utilization": 0.2, "queue_seconds": 0.006, "request_seconds": 0.029},
        {"gpu_utilization": 0.2, "queue_seconds": 0.006, "request_seconds": 0.031},
    ),  # queue ≥ 20 % of server time (with 6 ms, over the budget floor)
    (
        add_instance,
        {"gpu_utilization": 0.2, "pending_requests": 1.0, "gpu_memory_used_bytes": 80.0},
        {"gpu_utilization": 0.2, "pending_requests": 1.0, "gpu_memory_used_bytes": 80.0 + TINY},
    ),
    (
        raise_queue_delay,
        {"pending_requests": 4.0, "batch_size_average": 4.0 - TINY},
        {"pending_requests": 4.0, "batch_size_average": 4.0},
    ),
    (
        raise_queue_delay,
        {"pending_requests": 4.0},
        {"pending_requests": 4.0 - TINY},
    ),
    (
        raise_queue_delay,
        {"sweep_plateau": True, "p95_seconds": 0.0399},
        {"sweep_plateau": True, "p95_seconds": 0.040},
    ),
    (
        optimize_model,
        {"p95_seconds": 0.06, "gpu_utilization": 0.8, "compute_infer_seconds": 0.005},
        {"p95_seconds": 0.06, "gpu_utilization": 0.8 - TINY, "compute_infer_seconds": 0.005},
    ),
    (
        optimize_model,
        {"p95_seconds": 0.06, "gpu_utilization": None, "compute_infer_seconds": 0.005},
        {"p95_seconds": 0.06, "gpu_utilization": None, "compute_infer_seconds": 0.005 - TINY},
    ),
    (
        reduce_io,
        {"compute_input_seconds": 0.003, "compute_output_seconds": 0.001},
        {"compute_input_seconds": 0.003, "compute_output_seconds": 0.001 - TINY},
    ),
    (
        reduce_network_overhead,
        {"client_mean_seconds": 0.020},
        {"client_mean_seconds": 0.020 - TINY},
    ),
    (
        reduce_network_overhead,
        {"request_seconds": 0.002, "client_mean_seconds": 0.012},
        {"request_seconds": 0.002, "client_mean_seconds": 0.012 - TINY},
    ),
    (
        tune_queue_policy,
        {"failures_per_second_by_reason": MappingProxyType({"REJECTED": TINY})},
        {"failures_per_second_by_reason": MappingProxyType({"REJECTED": 0.0, "BACKEND": 9.0})},
    ),
    (
        reduce_kv_pressure,
        {"kv_cache_usage_ratio": 0.9, "requests_waiting": 1.0},
        {"kv_cache_usage_ratio": 0.9 - TINY, "requests_waiting": 1.0},
    ),
    (
        reduce_kv_pressure,
        {**FULL, "requests_waiting": 1.0},
        {**FULL, "requests_waiting": 1.0 - TINY},
    ),
    (
        reduce_kv_pressure,
        {**FULL, "preemptions_per_second": TINY},
        {**FULL, "preemptions_per_second": 0.0, "requests_waiting": 0.0, "paused_requests": 0.0},
    ),
    (reduce_kv_pressure, {**FULL, "paused_requests": 1.0}, {**FULL, "paused_requests": 0.0}),
    (
        scale_out_prefill,
        TTFT_BURNS,
        {**TTFT_BURNS, "requests_waiting": 1.0 - TINY},
    ),
    (scale_out_prefill, TTFT_BURNS, {**TTFT_BURNS, "ttft_burning": False}),
    (
        scale_out_prefill,
        {**TTFT_BURNS, "kv_cache_usage_ratio": 0.9 - TINY},
        {**TTFT_BURNS, "kv_cache_usage_ratio": 0.9},
    ),  # a full cache is REDUCE_KV_PRESSURE's
    (
        scale_out_prefill,
        {"requests_waiting": 2.0, "ttft_budget_seconds": 0.5, "server_ttft_mean_seconds": 0.5001},
        {"requests_waiting": 2.0, "ttft_budget_seconds": 0.5, "server_ttft_mean_seconds": 0.5},
    ),  # the server's own TTFT over the budget, where no canary streams
    (
        scale_out_prefill,
        {"requests_waiting": 2.0, "ttft_budget_seconds": 0.5, "server_ttft_mean_seconds": 0.9},
        {"requests_waiting": 2.0, "ttft_budget_seconds": None, "server_ttft_mean_seconds": 0.9},
    ),
    (
        lower_max_sequences,
        {**ITL_BURNS, "requests_running": 8.0},
        {**ITL_BURNS, "requests_running": 8.0 - TINY},
    ),
    (
        lower_max_sequences,
        {**ITL_BURNS, "requests_running": 8.0},
        {**ITL_BURNS, "requests_running": 8.0, "itl_burning": False},
    ),
    (
        lower_max_sequences,
        {"itl_burning": True, "requests_running": 1.0 + TINY},
        {"itl_burning": True, "requests_running": 1.0},
    ),  # the engine's maximum unknown: more than one sequence decoding
    (
        remove_instance,
        {**IDLE_STREAM, "gpu_utilization": 0.5 - TINY, "requests_waiting": 0.0},
        {**IDLE_STREAM, "gpu_utilization": 0.5, "requests_waiting": 0.0},
    ),
    (
        remove_instance,
        {**IDLE_STREAM, "requests_waiting": 1.0 - TINY},
        {**IDLE_STREAM, "requests_waiting": 1.0},
    ),  # no pending count (a vLLM server): the engine's waiting sequences stand in
    (
        remove_instance,
        {**IDLE_STREAM, "pending_requests": 0.0, "requests_waiting": 3.0},
        {**IDLE_STREAM, "pending_requests": 1.0, "requests_waiting": 0.0},
    ),  # Triton's pending count, when printed, is the one read
    (
        remove_instance,
        {**IDLE_STREAM, "pending_requests": 0.0},
        {**IDLE_STREAM, "pending_requests": 0.0, "streaming": False},
    ),  # an idle spare instance of a plain model is headroom, not waste
]


@pytest.mark.parametrize(
    ("rule", "fires", "silent"),
    BOUNDARIES,
    ids=[f"{rule.__name__}-{index}" for index, (rule, _, _) in enumerate(BOUNDARIES)],
)
def test_rule_boundary(rule: Check, fires: dict[str, Any], silent: dict[str, Any]) -> None:
    """A rule fires just across its threshold and stays silent just inside it."""
    assert rule(replace(BASE, **fires), LIMITS) is not None
    assert rule(replace(BASE, **silent), LIMITS) is None


def test_no_rule_fires_on_the_base_window() -> None:
    """A healthy window well inside every threshold fires no rule."""
    assert [rule.action for rule in RULES if rule.check(BASE, LIMITS)] == []


def test_every_rule_has_a_boundary_case() -> None:
    """Every rule in RULES has a boundary case here, so a new one cannot go untested."""
    assert {rule.check for rule in RULES} == {check for check, _, _ in BOUNDARIES}


def test_queue_delay_halves_and_doubles() -> None:
    """Queue delay advice halves (1 µs to 0), doubles, and raises 0 to the configured first step."""
    over = replace(BASE, p95_seconds=0.06, queue_seconds=0.006, max_queue_delay_microseconds=1)
    lowered = lower_queue_delay(over, LIMITS)
    assert lowered is not None
    assert (lowered.current, lowered.proposed) == (1, 0)
    heavy = replace(BASE, pending_requests=10.0, max_queue_delay_microseconds=300)
    raised = raise_queue_delay(heavy, LIMITS)
    assert raised is not None
    assert (raised.current, raised.proposed) == (300, 600)
    first = raise_queue_delay(replace(heavy, max_queue_delay_microseconds=0), LIMITS)
    assert first is not None
    assert first.proposed == LIMITS.first_queue_delay_microseconds


def test_raising_the_delay_never_spends_more_than_the_headroom() -> None:
    """p95 39.9 ms of 0.8 × 50 ms: 100 µs of headroom, so 1000 µs becomes 1100, not 2000."""
    window = replace(
        BASE, pending_requests=10.0, max_queue_delay_microseconds=1000, p95_seconds=0.0399
    )
    raised = raise_queue_delay(window, LIMITS)
    assert raised is not None
    assert raised.proposed == pytest.approx(1100, abs=1)


def test_instance_count_moves_by_one() -> None:
    """Instance advice adds or removes exactly one instance at a time."""
    add = add_instance(replace(BASE, gpu_utilization=0.1, pending_requests=3.0), LIMITS)
    remove = remove_instance(replace(BASE, gpu_memory_used_bytes=95.0), LIMITS)
    assert add is not None
    assert remove is not None
    assert (add.current, add.proposed, remove.current, remove.proposed) == (2, 3, 2, 1)


def test_the_batching_delay_is_not_waiting_for_an_instance() -> None:
    """Queue time up to ``max_queue_delay_microseconds`` is the batcher's own wait: a
    model with a 2 ms delay whose requests queue 6.9 ms waits 4.9 ms for an instance
    (under 10 % of 50 ms), 7.1 ms is over it; with batching off all of it counts."""
    shared = {"gpu_utilization": 0.2, "request_seconds": 0.020}
    held = replace(BASE, max_queue_delay_microseconds=2000, **shared)
    assert not gpu_underused(replace(held, queue_seconds=0.0069), LIMITS)
    assert gpu_underused(replace(held, queue_seconds=0.0071), LIMITS)
    unbatched = replace(held, dynamic_batching=False, queue_seconds=0.0051)
    assert gpu_underused(unbatched, LIMITS)


def test_gpu_underuse_needs_requests_to_queue() -> None:
    """An idle GPU is underused only with requests pending and its utilization known."""
    idle = replace(BASE, gpu_utilization=0.1)
    assert not gpu_underused(idle, LIMITS)
    assert gpu_underused(replace(idle, pending_requests=1.0), LIMITS)
    assert not gpu_underused(replace(idle, gpu_utilization=None, pending_requests=5.0), LIMITS)


def test_network_advice_suggests_grpc_only_to_http_clients() -> None:
    """Network advice suggests gRPC with binary data to HTTP clients, never to gRPC ones."""
    slow = replace(BASE, client_mean_seconds=0.05)
    http = reduce_network_overhead(replace(slow, protocol="http"), LIMITS)
    grpc = reduce_network_overhead(replace(slow, protocol="grpc"), LIMITS)
    assert http is not None
    assert grpc is not None
    assert str(http.proposed).startswith("gRPC, binary tensor data")
    assert "gRPC" not in str(grpc.proposed)


def test_thresholds_are_configurable() -> None:
    """A configured GPU underuse threshold moves where the add-instance rule fires."""
    window = replace(BASE, gpu_utilization=0.55, pending_requests=2.0)
    assert add_instance(window, LIMITS) is None
    assert add_instance(window, AdvisorThresholds(gpu_underuse_threshold=0.6)) is not None


KV_PRESSURE = replace(
    BASE,
    streaming=True,
    llm_backend="vllm",
    kv_cache_usage_ratio=0.97,
    preemptions_per_second=0.5,
    requests_waiting=3.0,
    requests_running=40.0,
    requests_max=64.0,
)


def test_kv_pressure_names_its_numbers_and_lowers_the_limit_by_a_quarter() -> None:
    """KV advice: vLLM's max_num_seqs 64 → 48, the numbers in its reason and evidence."""
    (advice,) = advise(KV_PRESSURE, LIMITS)
    assert advice.action == Action.REDUCE_KV_PRESSURE
    assert (advice.severity, advice.config_change) == (Severity.TICKET, True)
    assert advice.proposed_change == "max_num_seqs: 64 → 48"
    assert advice.reason == (
        "KV cache 97 % used (full from 90 %) with 0.50 preemptions/s and 3.0 sequences waiting"
    )
    assert dict(advice.evidence) == {
        "kv_cache_usage_ratio": 0.97,
        "preemptions_per_second": 0.5,
        "requests_waiting": 3.0,
        "requests_running": 40.0,
    }
    assert "FP8/INT8 KV" in advice.expected_effect
    assert "tensor parallelism" in advice.expected_effect


def test_kv_pressure_knob_follows_the_backend_and_what_is_known() -> None:
    """TensorRT-LLM names max_batch_size/max_num_tokens; without a max, the running count."""
    trt = reduce_kv_pressure(
        replace(KV_PRESSURE, llm_backend="tensorrt_llm", requests_max=None, paused_requests=2.0),
        LIMITS,
    )
    assert trt is not None
    assert (trt.parameter, trt.current, trt.proposed) == (
        "max_batch_size / max_num_tokens",
        "≥ 40 (running now)",
        30,
    )
    assert trt.reason.endswith("3.0 sequences waiting, 2.0 paused")
    blind = reduce_kv_pressure(
        replace(KV_PRESSURE, llm_backend=None, requests_max=None, requests_running=None), LIMITS
    )
    assert blind is not None
    assert (blind.parameter, blind.current) == ("max concurrent sequences", "unknown")


def test_one_configuration_change_at_a_time_kv_first() -> None:
    """KV pressure, slow tokens and late first tokens at once: the KV change alone of the
    config changes; the prefill advice stays silent while the cache is full."""
    both = replace(KV_PRESSURE, itl_burning=True, ttft_burning=True, requests_running=60.0)
    assert [r.action for r in advise(both, LIMITS)] == [Action.REDUCE_KV_PRESSURE]
    assert lower_max_sequences(both, LIMITS) is not None
    roomy = replace(both, kv_cache_usage_ratio=0.5)
    assert [r.action for r in advise(roomy, LIMITS)] == [
        Action.SCALE_OUT_PREFILL,
        Action.LOWER_MAX_SEQUENCES,
    ]


def test_scale_out_prefill_is_advice_with_the_ttft_numbers() -> None:
    """Prefill advice: info, no config change, TTFT p95 against its budget and the queue."""
    late = replace(
        BASE,
        ttft_burning=True,
        ttft_p95_seconds=1.2,
        ttft_budget_seconds=0.5,
        requests_waiting=6.0,
        requests_running=4.0,
    )
    (advice,) = advise(late, LIMITS)
    assert (advice.action, advice.severity, advice.config_change) == (
        Action.SCALE_OUT_PREFILL,
        Severity.INFO,
        False,
    )
    assert advice.reason == (
        "time to first token p95 1200.0 ms against the 500.0 ms TTFT budget "
        "while 6.0 sequences wait for admission"
    )
    assert dict(advice.evidence) == {
        "ttft_p95_seconds": 1.2,
        "ttft_budget_seconds": 0.5,
        "requests_waiting": 6.0,
        "requests_running": 4.0,
    }
    assert "enable_chunked_prefill" in str(advice.proposed)
    assert "enable_chunked_context" in str(advice.proposed)
    server = scale_out_prefill(
        replace(late, ttft_burning=False, ttft_p95_seconds=None, server_ttft_mean_seconds=0.8),
        LIMITS,
    )
    assert server is not None
    assert server.reason.startswith("time to first token server mean 800.0 ms against")


def test_lower_max_sequences_names_the_full_batch() -> None:
    """Slow tokens with 60 of 64 sequences running: max_num_seqs 64 → 48, ticket."""
    slow = replace(
        BASE,
        llm_backend="vllm",
        itl_burning=True,
        itl_p95_seconds=0.08,
        itl_budget_seconds=0.05,
        requests_running=60.0,
        requests_max=64.0,
    )
    (advice,) = advise(slow, LIMITS)
    assert (advice.action, advice.severity, advice.config_change) == (
        Action.LOWER_MAX_SEQUENCES,
        Severity.TICKET,
        True,
    )
    assert advice.proposed_change == "max_num_seqs: 64 → 48"
    assert advice.reason == (
        "the ITL SLO burns (gap p95 80.0 ms, over the 50.0 ms budget) with 60.0 of 64 running"
    )
    assert dict(advice.evidence) == {
        "itl_p95_seconds": 0.08,
        "itl_budget_seconds": 0.05,
        "requests_running": 60.0,
        "requests_max": 64.0,
    }


def test_idle_streaming_instance_suggests_a_smaller_gpu() -> None:
    """An idle streaming model's spare instance: one less or a smaller GPU, with numbers."""
    idle = replace(BASE, **IDLE_STREAM, requests_waiting=0.0, requests_running=2.0)
    advice = remove_instance(idle, LIMITS)
    assert advice is not None
    assert (advice.current, advice.proposed) == (2, 1)
    assert advice.reason == (
        "GPU 20 % busy (underused below 50 %) with 0.0 requests waiting, 2.0 running"
    )
    assert "or a smaller GPU" in advice.expected_effect
    assert advice.evidence["queued_requests"] == 0.0
