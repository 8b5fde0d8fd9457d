"""Capacity from a sweep (closed loop, then the open-loop check), the swept compute time
at a load, desired replicas and cost: the pure functions of analysis/capacity.py, and
the scheduled sweep's open-loop check driven by a runner that answers as a server would."""

from __future__ import annotations

import dataclasses

import pytest

from sweep_support import judged
from sweep_support import plain_step as step
from tritonwatch.analysis.capacity import (
    closed_loop_capacity,
    cost_per_1k,
    desired_replicas,
    inferences_per_request,
    open_loop_capacity,
    open_loop_rates,
    swept_capacity,
    swept_compute_seconds,
)
from tritonwatch.records.sweep_records import (
    SweepSettings,
    SweepSteps,
)
from tritonwatch.runtime.scheduled_sweeps import check_open_loop

BUDGET = 0.1


SETTINGS = SweepSettings(
    url="http://127.0.0.1:1", model="m", levels=(1, 2, 4, 8), budget_p95=BUDGET
)
CURVE = [step(1, 30, 0.035), step(2, 39.5, 0.06), step(4, 40, 0.098), step(8, 40.5, 0.2)]
"""A 25 ms model, one instance: saturates near 40/s; concurrency 8 breaks the budget."""


def test_closed_loop_capacity_is_the_best_in_budget_throughput() -> None:
    """Fails if the capacity is the operating point's (lowest concurrency within 2 %),
    a step over budget, or a figure without a budget."""
    result = judged(SETTINGS, CURVE)
    assert result.operating_point is not None and result.operating_point.level == 2
    assert closed_loop_capacity(result) == 40.0
    assert (
        closed_loop_capacity(judged(dataclasses.replace(SETTINGS, budget_p95=None), CURVE)) is None
    )
    assert closed_loop_capacity(judged(SETTINGS, [step(1, 30, 0.2)])) is None


def test_the_open_loop_rates_go_down_from_capacity_in_requests() -> None:
    """Fails if the check's rates are not requests/s (inferences over the batch), highest first."""
    assert open_loop_rates(40.0, 1.0) == pytest.approx((40, 36, 32, 28, 24, 20))
    assert open_loop_rates(80.0, 4.0)[0] == pytest.approx(20.0)
    assert inferences_per_request([step(1, 10, 0.01, batch=4), step(2, 20, 0.01, batch=4)]) == 4


def test_an_open_loop_step_counts_only_in_budget_and_when_it_held_its_rate() -> None:
    """Fails if a step over budget, or one whose server fell behind the offered rate,
    sets the open-loop capacity."""
    over = step(40, 39.0, 0.4)
    behind = step(36, 30.0, 0.05)  # offered 36/s, took 30/s: below the 90 % held rate
    held = step(32, 31.8, 0.09)
    assert open_loop_capacity([over], BUDGET) is None
    assert open_loop_capacity([over, behind], BUDGET) is None
    assert open_loop_capacity([over, behind, held], BUDGET) == 31.8


def test_check_open_loop_steps_down_until_a_rate_holds_in_budget() -> None:
    """Fails if the check asks other rates than the closed loop's capacity and below, in
    rate mode with Poisson arrivals one level at a time, or goes on after the first rate
    that held."""
    asked: list[tuple[str, tuple[float, ...]]] = []
    arrivals: set[str] = set()
    answers = {40.0: step(40, 39.5, 0.5), 36.0: step(36, 35.8, 0.15), 32.0: step(32, 31.9, 0.08)}

    def run(settings: SweepSettings) -> SweepSteps:
        asked.append((settings.mode, settings.levels))
        arrivals.add(settings.arrivals)
        (rate,) = settings.levels
        return SweepSteps(settings, (answers[round(rate, 6)],), False, ())

    result = check_open_loop(judged(SETTINGS, CURVE), run)
    assert [(mode, tuple(round(r, 6) for r in levels)) for mode, levels in asked] == [
        ("rate", (40.0,)),
        ("rate", (36.0,)),
        ("rate", (32.0,)),
    ]
    assert arrivals == {"poisson"}  # bursty, as independent users arrive
    assert result.open_loop_checked and len(result.open_loop) == 3
    capacity = swept_capacity(result, finished_at=1000.0)
    assert capacity is not None
    assert (capacity.closed_loop, capacity.open_loop, capacity.inferences_per_second) == (
        40,
        31.9,
        31.9,
    )


def test_no_open_loop_check_without_a_closed_loop_capacity() -> None:
    """Fails if a sweep whose every step broke the budget is 'checked' (it has nothing to check)."""

    def run(settings: SweepSettings) -> SweepSteps:
        raise AssertionError("no rate step is due")

    result = judged(SETTINGS, [step(1, 30, 0.2)])
    assert check_open_loop(result, run) is result
    assert swept_capacity(result, 0.0) is None


def test_an_unchecked_sweep_reports_the_closed_loop_and_a_failed_check_nothing() -> None:
    """Fails if a sweep whose open loop held no rate still reports the closed loop's
    (optimistic) figure as its capacity."""
    unchecked = swept_capacity(judged(SETTINGS, CURVE), 5.0)
    assert unchecked is not None and unchecked.inferences_per_second == 40.0
    failed = dataclasses.replace(
        judged(SETTINGS, CURVE), open_loop=(step(40, 39, 0.5),), open_loop_checked=True
    )
    capacity = swept_capacity(failed, 5.0)
    assert capacity is not None and capacity.inferences_per_second is None


def test_the_swept_compute_time_is_interpolated_at_the_live_load() -> None:
    """Fails if the compute time at a load between two steps is not on the line between
    them, or a load outside the steps is not the nearest step's."""
    steps = [step(1, 10, 0.01, compute=0.020), step(2, 30, 0.02, compute=0.030), step(4, 40, 0.05)]
    assert swept_compute_seconds(steps, 20.0) == pytest.approx(0.025)
    assert swept_compute_seconds(steps, 5.0) == pytest.approx(0.020)
    assert swept_compute_seconds(steps, 90.0) == pytest.approx(0.030)
    assert swept_compute_seconds([step(1, 10, 0.01)], 5.0) is None


def test_desired_replicas_hold_the_service_load_at_the_target_utilisation() -> None:
    """Fails if the count is not ceil(Σ load / (capacity × utilisation)) + spare, or one
    replica's capacity is not the lowest measured."""
    wanted = desired_replicas(
        "triton",
        "m",
        {"a": 50.0, "b": 45.0, "c": 0.0},
        {"a": 40.0, "b": 44.0},
        target_utilisation=0.8,
        spare=1,
    )
    assert wanted is not None
    assert (wanted.replicas, wanted.load, wanted.capacity_per_replica) == (4, 95.0, 40.0)
    assert wanted.targets == ("a", "b", "c")
    exact = desired_replicas("s", "m", {"a": 64.0}, {"a": 40.0}, target_utilisation=0.8, spare=0)
    assert exact is not None and exact.replicas == 2  # 64 / 32 is exactly 2, not 3
    assert desired_replicas("s", "m", {"a": 1.0}, {}, target_utilisation=0.8, spare=0) is None


def test_cost_per_1k_at_load_is_the_model_share_and_at_capacity_the_whole() -> None:
    """Fails if the cost at load ignores the model's share of the target, or a side
    without figures appears."""
    per_second = 3.6 / 3600  # 3.60 an hour
    costs = cost_per_1k(per_second, 0.25, load=20.0, capacity=40.0)  # 1/4 of 3.60 over 72k
    assert costs == pytest.approx({"load": 0.0125, "capacity": 0.025})
    assert cost_per_1k(per_second, None, load=20.0, capacity=None) == {}
    assert cost_per_1k(per_second, 1.0, load=0.0, capacity=40.0).keys() == {"capacity"}
