"""Instance advice from the resource the instance runs on, and the reason when no change
is safe: a ``KIND_CPU`` model queued behind a waiting instance on an idle host gets one
more instance; a saturated host gets neither more instances nor a lower batching delay,
and says so; every burning, bottlenecked model gets a recommendation or a reason.

The numbers of :data:`ONE_CPU_INSTANCE` are the ones measured on real tritonserver 2.51:
a Python-backend model that waits 20 ms per request, ``max_batch_size: 0``, one
``KIND_CPU`` instance, three concurrent clients beside the canary (queue about 60 ms,
p95 82–84 ms against a 40 ms budget).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tritonwatch.analysis.advice_blocked import BlockedReason, blocked_reason
from tritonwatch.analysis.advisor import advise
from tritonwatch.analysis.advisor_records import Action, AdvisorInput, AdvisorThresholds

ONE_CPU_INSTANCE = AdvisorInput(
    target="t",
    model="sleepy",
    latency_budget_seconds=0.040,
    p95_seconds=0.083,
    client_mean_seconds=0.080,
    request_seconds=0.080,
    queue_seconds=0.060,
    compute_input_seconds=0.0001,
    compute_infer_seconds=0.0200,
    compute_output_seconds=0.0001,
    requests_per_second=50.0,
    batch_size_average=1.0,
    max_batch_size=0,
    dynamic_batching=False,
    instance_count=1,
    pending_requests=3.0,
    protocol="http",
    instance_kind="KIND_CPU",
    host_cpu_utilization=0.12,
)
LIMITS = AdvisorThresholds()


def _actions(model: AdvisorInput) -> list[tuple[Action, object, object]]:
    return [(r.action, r.current, r.proposed) for r in advise(model, LIMITS)]


def test_a_queued_cpu_instance_on_an_idle_host_gets_exactly_one_more_instance() -> None:
    """Breaks if the measured case gets no advice (the silence the issue found), or
    anything besides instance_group.count 1 → 2."""
    (only,) = advise(ONE_CPU_INSTANCE, LIMITS)
    assert (only.action, only.parameter, only.current, only.proposed) == (
        Action.ADD_INSTANCE, "instance_group.count", 1, 2,
    )  # fmt: skip
    assert only.evidence["host_cpu_utilization"] == 0.12
    assert "KIND_CPU" in only.reason and "cannot batch" in only.reason


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"host_cpu_utilization": 0.7}, "the host's CPU has no room for another instance"),
        ({"host_cpu_utilization": None}, "nobody measured the host's CPU"),
        ({"queue_seconds": 0.010}, "the queue is not the bulk of the latency"),
        ({"pending_requests": 0.0, "queue_seconds": 0.002}, "nothing queues"),
        ({"max_batch_size": 8, "dynamic_batching": True, "batch_size_average": 2.0},
         "batching could still take more"),
    ],
)  # fmt: skip
def test_no_cpu_instance_is_added_without_every_cause(change: dict[str, object], why: str) -> None:
    """Breaks if an instance is proposed when one of its causes is missing."""
    assert Action.ADD_INSTANCE not in {
        a for a, _, _ in _actions(replace(ONE_CPU_INSTANCE, **change))
    }, why  # type: ignore[arg-type]


def test_full_batches_count_as_batching_that_cannot_take_more() -> None:
    """Breaks if a batching model whose batches are already full is refused the instance."""
    full = replace(ONE_CPU_INSTANCE, max_batch_size=4, dynamic_batching=True,
                   batch_size_average=3.8, max_queue_delay_microseconds=0)  # fmt: skip
    assert (Action.ADD_INSTANCE, 1, 2) in _actions(full)


def test_a_cpu_models_gpu_numbers_do_not_decide_its_instances() -> None:
    """Breaks if a KIND_CPU model gets GPU-underuse advice from the host's GPUs."""
    on_gpu_host = replace(ONE_CPU_INSTANCE, host_cpu_utilization=0.7, gpu_utilization=0.1,
                          gpu_memory_used_bytes=1e9, gpu_memory_total_bytes=80e9)  # fmt: skip
    assert Action.ADD_INSTANCE not in {a for a, _, _ in _actions(on_gpu_host)}


DELAYED = replace(
    ONE_CPU_INSTANCE, model="batching", max_batch_size=8, dynamic_batching=True,
    max_queue_delay_microseconds=80_000, batch_size_average=1.5, queue_seconds=0.070,
    instance_kind="KIND_GPU", gpu_utilization=0.2, gpu_memory_used_bytes=4e9,
    gpu_memory_total_bytes=16e9,
)  # fmt: skip


def test_a_saturated_host_gets_neither_an_instance_nor_a_lower_delay() -> None:
    """Breaks if a CPU-starved host is told to add an instance or lower the queue delay
    (the queue is the host's: neither would run a request sooner)."""
    assert (Action.LOWER_QUEUE_DELAY, 80_000, 40_000) in _actions(DELAYED)  # the control
    for model in (ONE_CPU_INSTANCE, DELAYED):
        starved = replace(model, host_cpu_utilization=0.97)
        actions = {a for a, _, _ in _actions(starved)}
        assert not actions & {Action.ADD_INSTANCE, Action.LOWER_QUEUE_DELAY}, model.model
        reason = blocked_reason(starved, LIMITS, bottleneck="queue-bound", burning=True,
                                recommendations=advise(starved, LIMITS))  # fmt: skip
        assert reason is BlockedReason.HOST_CPU_SATURATED


@pytest.mark.parametrize(
    ("change", "bottleneck", "reason"),
    [
        ({"host_cpu_utilization": 0.95}, "queue-bound", BlockedReason.HOST_CPU_SATURATED),
        ({"instance_kind": "KIND_GPU", "gpu_utilization": 0.95}, "queue-bound",
         BlockedReason.GPU_SATURATED),
        ({"instance_count": None}, "queue-bound", BlockedReason.NO_CONFIG_API),
        ({}, "compute-bound", BlockedReason.NEEDS_MODEL_CHANGE),
        ({}, "io-bound", BlockedReason.NEEDS_MODEL_CHANGE),
        ({}, "network-bound", BlockedReason.NEEDS_CLIENT_CHANGE),
        ({"host_cpu_utilization": None}, "queue-bound", BlockedReason.NO_READINGS),
        ({"host_cpu_utilization": 0.7}, "queue-bound", BlockedReason.ALREADY_AT_LIMIT),
    ],
)  # fmt: skip
def test_a_burning_bottlenecked_model_without_advice_says_why(
    change: dict[str, object], bottleneck: str, reason: BlockedReason
) -> None:
    """Breaks if a model that burns its SLO with a bottleneck and gets no recommendation
    has no reason, or the wrong one."""
    model = replace(ONE_CPU_INSTANCE, **change)  # type: ignore[arg-type]
    assert blocked_reason(model, LIMITS, bottleneck=bottleneck, burning=True,  # type: ignore[arg-type]
                          recommendations=[]) is reason  # fmt: skip


def test_silence_means_healthy() -> None:
    """Breaks if a reason is given where none is owed: a recommendation exists, the SLO
    does not burn, or no stage is a bottleneck."""
    advice = advise(ONE_CPU_INSTANCE, LIMITS)
    for bottleneck, burning, recommendations in (
        ("queue-bound", True, advice), ("queue-bound", False, []), ("balanced", True, []),
        (None, True, []),
    ):  # fmt: skip
        assert blocked_reason(ONE_CPU_INSTANCE, LIMITS, bottleneck=bottleneck,  # type: ignore[arg-type]
                              burning=burning, recommendations=recommendations) is None  # fmt: skip


def test_the_host_is_saturated_from_the_documented_threshold_on() -> None:
    """Breaks if a host at exactly ``cpu_saturated_threshold`` (0.9, the documented "at
    or above") still gets an instance proposed, or one just under it is called
    saturated."""
    assert LIMITS.cpu_saturated_threshold == 0.9
    at = replace(ONE_CPU_INSTANCE, host_cpu_utilization=LIMITS.cpu_saturated_threshold)
    assert Action.ADD_INSTANCE not in {a for a, _, _ in _actions(at)}
    reason = blocked_reason(
        at, LIMITS, bottleneck="queue-bound", burning=True, recommendations=advise(at, LIMITS)
    )
    assert reason is BlockedReason.HOST_CPU_SATURATED
    under = replace(ONE_CPU_INSTANCE, host_cpu_utilization=0.89)
    assert (
        blocked_reason(under, LIMITS, bottleneck="queue-bound", burning=True, recommendations=[])
        is not BlockedReason.HOST_CPU_SATURATED
    )
