"""Advisor rules at the edges mutation testing found untested (mutation/RESULTS.md): exact
shares and budgets, ``max_batch_size`` 2, unknown numbers, configured thresholds of 0.
Same shape as test_advisor_rules.py's boundaries: fires one way, silent the other."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from test_advisor_rules import BASE, IDLE_STREAM, LIMITS, TINY, TTFT_BURNS

from tritonwatch.analysis.advisor_records import AdvisorThresholds
from tritonwatch.analysis.advisor_rules import (
    Check,
    add_instance,
    enable_dynamic_batching,
    lower_max_sequences,
    lower_queue_delay,
    optimize_model,
    raise_queue_delay,
    reduce_io,
    reduce_network_overhead,
    remove_instance,
    scale_out_prefill,
)

EXACT_QUEUE = {
    "latency_budget_seconds": 0.04,
    "queue_seconds": 0.004,
    "request_seconds": 0.020,
    "max_queue_delay_microseconds": 0,
}
HELD_2MS = {"gpu_utilization": 0.2, "request_seconds": 0.020, "max_queue_delay_microseconds": 2000}
CPU_QUEUE = {
    "instance_kind": "KIND_CPU",
    "host_cpu_utilization": 0.3,
    "max_batch_size": 1,
    "pending_requests": 2.0,
    "queue_seconds": 0.006,
}

EDGES: list[tuple[Check, dict[str, Any], dict[str, Any]]] = [
    (
        remove_instance,
        {**IDLE_STREAM, "requests_waiting": 0.0},
        {**IDLE_STREAM, "requests_waiting": None},
    ),  # neither Triton's pending count nor the engine's waiting sequences: no verdict
    (
        add_instance,
        {**CPU_QUEUE, "host_cpu_utilization": 0.5 - TINY},
        {**CPU_QUEUE, "host_cpu_utilization": 0.5},
    ),  # KIND_CPU: the host's CPU has spare below 50 % busy
    (
        add_instance,
        {**CPU_QUEUE, "queue_seconds": 0.005},
        {**CPU_QUEUE, "queue_seconds": 0.005 - TINY},
    ),  # KIND_CPU: the queue is at least half of the server's time
    (
        add_instance,
        {**CPU_QUEUE, "max_batch_size": 8, "batch_size_average": 0.9 * 8},
        {**CPU_QUEUE, "max_batch_size": 8, "batch_size_average": 0.9 * 8 - TINY},
    ),  # KIND_CPU: batches of 90 % of max_batch_size are full
    (
        add_instance,
        {"gpu_utilization": 0.2, "pending_requests": 1.0},
        {"gpu_utilization": 0.2, "pending_requests": 1.0, "gpu_memory_used_bytes": None},
    ),  # GPU memory unknown: no room to promise
    (
        add_instance,
        {"gpu_utilization": 0.2, "pending_requests": 1.0},
        {"gpu_utilization": 0.2, "pending_requests": 1.0, "instance_count": None},
    ),  # the instance count unknown: nothing to add one to
    (
        add_instance,
        {**EXACT_QUEUE, "gpu_utilization": 0.2},
        {**EXACT_QUEUE, "gpu_utilization": 0.2, "request_seconds": 0.020 + TINY},
    ),  # queue exactly 20 % of server time and exactly 10 % of the budget: requests queue
    (
        add_instance,
        {**EXACT_QUEUE, "gpu_utilization": 0.2},
        {**EXACT_QUEUE, "gpu_utilization": 0.2, "queue_seconds": 0.004 - TINY},
    ),
    (
        add_instance,
        {**HELD_2MS, "queue_seconds": 0.0071},
        {**HELD_2MS, "queue_seconds": 0.007},
    ),  # 7 ms of queue less the 2 ms batching delay is 5 ms, not over 10 % of 50 ms
    (
        add_instance,
        {**CPU_QUEUE, "max_batch_size": 2, "batch_size_average": 0.9 * 2},
        {**CPU_QUEUE, "max_batch_size": 2, "batch_size_average": 0.9 * 2 - TINY},
    ),  # KIND_CPU: a max_batch_size of 2 batches
    (
        enable_dynamic_batching,
        {"dynamic_batching": False, "pending_requests": 2.0, "max_batch_size": 2},
        {"dynamic_batching": False, "pending_requests": 2.0, "max_batch_size": 1},
    ),
    (
        raise_queue_delay,
        {"pending_requests": 4.0, "max_batch_size": 2, "batch_size_average": 0.9},
        {"pending_requests": 4.0, "max_batch_size": 1, "batch_size_average": 0.4},
    ),
    (
        raise_queue_delay,
        {"pending_requests": 4.0},
        {"pending_requests": 4.0, "dynamic_batching": False},
    ),
    (
        lower_queue_delay,
        {"p95_seconds": 0.06, "queue_seconds": 0.005},
        {"p95_seconds": None, "queue_seconds": 0.005},
    ),
    (
        optimize_model,
        {"p95_seconds": 0.050 + TINY, "gpu_utilization": 0.8, "compute_infer_seconds": 0.005},
        {"p95_seconds": 0.050, "gpu_utilization": 0.8, "compute_infer_seconds": 0.005},
    ),
    (
        reduce_io,
        {"compute_input_seconds": 0.003, "compute_output_seconds": 0.001},
        {"compute_input_seconds": None, "compute_output_seconds": 0.004},
    ),
    (
        lower_max_sequences,
        {"itl_burning": True, "requests_max": 1.0, "requests_running": 1.0},
        {"itl_burning": True, "requests_max": 1.0, "requests_running": 0.8 - TINY},
    ),  # an engine limited to one sequence, running it
    (
        remove_instance,
        {"last_change_added_instance": True, "throughput_before_last_change": 19.5},
        {"last_change_added_instance": False, "throughput_before_last_change": 19.5},
    ),  # a throughput before a change that added no instance says nothing of instances
    (
        remove_instance,
        {
            "last_change_added_instance": True,
            "throughput_before_last_change": 0.5,
            "requests_per_second": 0.5,
        },
        {
            "last_change_added_instance": True,
            "throughput_before_last_change": 0.0,
            "requests_per_second": 0.5,
        },
    ),  # under one request a second before; none before is no comparison
    (
        reduce_network_overhead,
        {"client_mean_seconds": 0.03},
        {"client_mean_seconds": 0.03, "request_seconds": None},
    ),
    (
        scale_out_prefill,
        {**TTFT_BURNS, "requests_waiting": 1.0},
        {**TTFT_BURNS, "requests_waiting": 1.0 - TINY},
    ),
]


@pytest.mark.parametrize(
    ("rule", "fires", "silent"),
    EDGES,
    ids=[f"{rule.__name__}-{index}" for index, (rule, _, _) in enumerate(EDGES)],
)
def test_rule_edge(rule: Check, fires: dict[str, Any], silent: dict[str, Any]) -> None:
    """A rule fires on one side of an edge and stays silent on the other."""
    assert rule(replace(BASE, **fires), LIMITS) is not None
    assert rule(replace(BASE, **silent), LIMITS) is None


def test_a_heavy_load_is_the_configured_pending_count_and_unknown_is_none() -> None:
    """Breaks if an unknown pending count reads as a load of one request or more."""
    light = AdvisorThresholds(heavy_load_pending=0.5)
    window = replace(BASE, pending_requests=None, batch_size_average=1.0)
    assert raise_queue_delay(window, light) is None
    assert raise_queue_delay(replace(window, pending_requests=0.5), light) is not None


def test_raising_the_delay_spends_the_headroom_to_the_microsecond() -> None:
    """p95 600 ms against 0.8 × 2 s: one second of headroom, so 2 s of delay may grow by
    exactly 1 000 000 µs (a doubling would be 2 000 000)."""
    window = replace(
        BASE,
        latency_budget_seconds=2.0,
        p95_seconds=0.6,
        pending_requests=10.0,
        max_queue_delay_microseconds=2_000_000,
    )
    raised = raise_queue_delay(window, LIMITS)
    assert raised is not None
    assert raised.proposed == 3_000_000


def test_an_unchanged_throughput_is_a_stall_only_under_a_positive_gain() -> None:
    """Breaks if, with ``instance_stall_gain`` configured to 0, an added instance that
    left throughput exactly unchanged is not the same as one that bought a little."""
    window = replace(BASE, last_change_added_instance=True, throughput_before_last_change=20.0)
    assert remove_instance(window, AdvisorThresholds(instance_stall_gain=0.0)) is None
    assert remove_instance(window, AdvisorThresholds(instance_stall_gain=TINY)) is not None


def test_no_network_advice_without_a_client_mean_even_with_no_minimum_gap() -> None:
    """Breaks if a client mean of 0 (nothing measured) is divided by once the minimum
    gap is configured to 0."""
    window = replace(BASE, client_mean_seconds=0.0, request_seconds=0.0)
    assert reduce_network_overhead(window, AdvisorThresholds(network_gap_min_seconds=0.0)) is None
