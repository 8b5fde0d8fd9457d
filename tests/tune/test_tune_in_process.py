"""The tuning loop on exact inputs: the simulator in explicit mode, swept on virtual time.

Config changes go to the simulator through the real repository API (HTTP); each sweep
runs in process on the simulator's virtual time (``in_process_sweep``), so what the
tuner measures, and so every keep/revert, is the simulated server's alone, the same on
any host. ``test_tune.py`` keeps the real-socket sweep and the command line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from in_process_sweep import in_process_sweep

from sweep_support import tune_settings
from tritonwatch.commands.tune.candidates import Change
from tritonwatch.commands.tune.repository import (
    ModelRepository,
    NotExplicitModeError,
    changed,
    to_pbtxt,
)
from tritonwatch.commands.tune.tuner import Tuner
from tritonwatch.records.sweep_records import SweepResult
from tritonwatch.sim.server import Simulator

pytestmark = pytest.mark.sim


@pytest.fixture
def start() -> Iterator[Callable[..., Simulator]]:
    """Starts virtual-clock simulators; stops them at teardown."""
    started: list[Simulator] = []

    def start(**kwargs: Any) -> Simulator:
        simulator = Simulator(clock="virtual", **kwargs).start()
        started.append(simulator)
        return simulator

    yield start
    for simulator in started:
        simulator.stop()


def _tuner(
    sim: Simulator,
    model: str,
    budget: float,
    levels: tuple[float, ...] = (1, 2, 4, 8),
    window: float = 0.3,
    **options: Any,
) -> Tuner:
    settings = tune_settings(sim.http_url, model, budget, levels, window)
    return Tuner(settings, measure=in_process_sweep(sim), **options)


def test_queue_delay_too_high_is_lowered_until_p95_fits(start: Callable[..., Simulator]) -> None:
    """Breaks if too high a queue delay is not halved, step by step and on the server too,
    from 80 ms (nothing fits a 50 ms budget) to 10 ms (the timer still dispatches)."""
    sim = start(scenario="queue-delay-too-high")
    result = _tuner(sim, "resnet50", 0.05, (1, 2), window=0.8, apply=True, max_steps=3).run()
    on_server = ModelRepository(sim.http_url, "resnet50").config()
    delays = [
        (s.change.current, s.change.proposed, str(s.verdict))
        for s in result.history
        if s.change is not None
    ]
    assert delays == [(80000, 40000, "keep"), (40000, 20000, "keep"), (20000, 10000, "keep")]
    assert result.original["dynamic_batching"]["max_queue_delay_microseconds"] == 80000
    assert result.final["dynamic_batching"]["max_queue_delay_microseconds"] == 10000
    assert on_server["dynamic_batching"]["max_queue_delay_microseconds"] == 10000
    assert result.history[0].throughput is None  # nothing fit the budget before
    assert result.history[-1].p95 is not None
    assert result.history[-1].p95 <= 0.05
    assert set(changed(result.original, result.final)) == {"dynamic_batching"}
    assert to_pbtxt(result.final, ["dynamic_batching"]).startswith("dynamic_batching {")


def test_gpu_underused_gets_instances_until_the_gpu_saturates_then_stops(
    start: Callable[..., Simulator],
) -> None:
    """Breaks if the tuner does not add instances while they pay (30 % of the GPU each:
    4 fill it), keeps a fifth that buys nothing, or runs on to --max-steps."""
    sim = start(scenario="gpu-underused")
    result = _tuner(sim, "simple", 0.5, apply=True, max_steps=6).run()
    steps = [(s.change.proposed if s.change else None, str(s.verdict)) for s in result.history]
    assert steps == [
        (None, "baseline"),
        (2, "keep"),
        (3, "keep"),
        (4, "keep"),
        (5, "revert"),
    ]  # and then no candidate was left: it stopped by itself, not at --max-steps
    assert result.final["instance_group"][0]["count"] == 4
    throughputs = [s.throughput for s in result.history if s.verdict in ("baseline", "keep")]
    assert throughputs[0] is not None and throughputs[-1] is not None
    # 25/s an instance (40 ms executions) up to the GPU's 1 / (40 ms x 30 %) = 83/s.
    assert throughputs[-1] > 3 * throughputs[0]


def test_a_change_that_makes_things_worse_is_rolled_back(start: Callable[..., Simulator]) -> None:
    """Breaks if a change that hurts (a 30 ms delay on a 1 ms model) is kept, or is not
    undone on the server."""

    def worse(config: dict[str, Any], sweep: SweepResult, budget: float) -> list[Change]:
        """Offers one change known to hurt: a 30 ms queue delay on a 1 ms model."""
        delay = config["dynamic_batching"]["max_queue_delay_microseconds"]
        return [
            Change("dynamic_batching.max_queue_delay_microseconds", delay, 30000, "test: worse")
        ]

    sim = start()
    repository = ModelRepository(sim.http_url, "simple")
    original = repository.config()
    result = _tuner(sim, "simple", 0.05, (1, 2), apply=True, max_steps=1, propose=worse).run()
    assert repository.config() == original
    repository.close()
    assert str(result.history[1].verdict) == "revert"
    assert result.final == original


def test_without_apply_it_only_plans(start: Callable[..., Simulator]) -> None:
    """Breaks if the tuner without --apply changes the server, or plans anything but the
    first instance."""
    sim = start(scenario="gpu-underused")
    repository = ModelRepository(sim.http_url, "simple")
    original = repository.config()
    result = _tuner(sim, "simple", 0.5, apply=False, max_steps=3).run()
    assert repository.config() == original
    repository.close()
    assert result.plan is not None
    assert (result.plan.parameter, result.plan.current, result.plan.proposed) == (
        "instance_group[0].count",
        1,
        2,
    )
    assert len(result.history) == 1


def test_a_server_not_in_explicit_mode_is_refused_untouched(
    start: Callable[..., Simulator],
) -> None:
    """Breaks if a server not in explicit model-control mode is tuned, or its config moves."""
    sim = start(model_control_mode="none")
    repository = ModelRepository(sim.http_url, "simple")
    original = repository.config()
    with pytest.raises(NotExplicitModeError, match="--model-control-mode=explicit"):
        _tuner(sim, "simple", 0.05, (1,), apply=True, max_steps=2).run()
    assert repository.config() == original
    repository.close()


SPIKE = 40
"""Service times during a noisy sweep, times the usual: p95 far over the budget."""


def _noisy(sim: Simulator, noisy_calls: set[int]) -> Callable[[Any], Any]:
    """The in-process sweep, with the sweeps numbered in ``noisy_calls`` taken while a
    latency spike holds the server (a busy neighbour, a pause): noise, not the change."""
    measure = in_process_sweep(sim)
    calls = 0

    def sweep(settings: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls not in noisy_calls:
            return measure(settings)
        sim.inject_fault(kind="latency_spike", factor=SPIKE)
        try:
            return measure(settings)
        finally:
            sim.clear_faults()

    return sweep


def test_one_noisy_sweep_does_not_revert_a_change_that_helps(
    start: Callable[..., Simulator],
) -> None:
    """Breaks if the tuner reverts a change on one bad sweep: the sweep right after the
    first change is taken in a latency spike; the tuner measures once more, sees the
    change helps, and keeps it."""
    sim = start(scenario="queue-delay-too-high")
    settings = tune_settings(sim.http_url, "resnet50", 0.05, (1, 2), 0.8)
    said: list[str] = []
    tuner = Tuner(settings, measure=_noisy(sim, {2}), apply=True, max_steps=1, report=said.append)
    result = tuner.run()
    assert [line for line in said if "measuring once more" in line], said
    (step,) = [s for s in result.history if s.change is not None]
    assert (step.change.current, step.change.proposed, str(step.verdict)) == (80000, 40000, "keep")
    assert result.final["dynamic_batching"]["max_queue_delay_microseconds"] == 40000


def test_a_change_that_is_worse_twice_is_reverted(start: Callable[..., Simulator]) -> None:
    """Breaks if a change measured worse on both of its sweeps is kept, or if the second
    sweep is skipped (two bad sweeps in a row revert; one does not)."""
    sim = start(scenario="queue-delay-too-high")
    settings = tune_settings(sim.http_url, "resnet50", 0.05, (1, 2), 0.8)
    said: list[str] = []
    tuner = Tuner(settings, measure=_noisy(sim, {2, 3}), apply=True, max_steps=1,
                  report=said.append)  # fmt: skip
    result = tuner.run()
    assert len([line for line in said if "measuring once more" in line]) == 1, said
    (step,) = [s for s in result.history if s.change is not None]
    assert str(step.verdict) == "revert"
    assert result.final["dynamic_batching"]["max_queue_delay_microseconds"] == 80000
