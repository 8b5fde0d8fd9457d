"""Each advisor rule at its boundary: on the line one way, just across it the other."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any

import pytest

from tritonwatch.analysis.advisor_records import AdvisorInput, AdvisorThresholds
from tritonwatch.analysis.advisor_rules import (
    RULES,
    Check,
    add_instance,
    enable_dynamic_batching,
    gpu_underused,
    lower_queue_delay,
    optimize_model,
    raise_queue_delay,
    reduce_io,
    reduce_network_overhead,
    remove_instance,
    tune_queue_policy,
)

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
        {"gpu_utilization": 0.2, "queue_seconds": 0.005 + TINY, "request_seconds": 0.025},
        {"gpu_utilization": 0.2, "queue_seconds": 0.005 - TINY, "request_seconds": 0.025},
    ),  # queue ≥ 10 % of the budget (with a 20 % share of server time)
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
