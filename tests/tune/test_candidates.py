"""The tuner's candidate rules on hand-made sweeps, and the GPU probe on the simulator."""

from __future__ import annotations

from array import array
from dataclasses import replace

import pytest

from sweep_support import judged
from tritonwatch.commands.tune.candidates import candidates
from tritonwatch.commands.tune.gpu_probe import gpu_utilization_probe, model_gpu_indices
from tritonwatch.records.sweep_records import ServerBreakdown, SweepSettings
from tritonwatch.sim.server import Simulator
from tritonwatch.sweep.load_sweep import _step_result
from tritonwatch.sweep.stability import WindowResult
from tritonwatch.sweep.worker import WindowSamples

pytestmark = pytest.mark.sim

CONFIG = {
    "max_batch_size": 8,
    "dynamic_batching": {"max_queue_delay_microseconds": 1000},
    "instance_group": [{"count": 2, "kind": "KIND_GPU", "gpus": [0]}],
}
DELAY = "dynamic_batching.max_queue_delay_microseconds"


def _flat_sweep(queue: float, gpu: float | None, batch: float = 6.0) -> object:
    """Throughput flat from 2 on (a reached knee), p95 well inside 50 ms."""
    steps = []
    for level, rate in ((1, 500.0), (2, 900.0), (4, 905.0)):
        samples = WindowSamples(array("d", [0.004] * 300), cpu_seconds=0.1, wall_seconds=1.0)
        server = ServerBreakdown(300, 0.004, {"queue": queue, "compute_input": 0.0002,
                                              "compute_infer": 0.003, "compute_output": 0.0002}, batch)  # fmt: skip
        step = _step_result(level, 1, [samples] * 3, [WindowResult(rate, 0.004)] * 3,
                            processes=1, percentile=95, server=server)  # fmt: skip
        steps.append(replace(step, inferences_per_second=rate, requests_per_second=rate,
                             gpu_utilization=gpu))  # fmt: skip
    return judged(
        SweepSettings(url="http://127.0.0.1:1", model="m", levels=(1, 2, 4), budget_p95=0.05),
        steps,
        False,
        [],
    )


def test_flat_curve_with_an_idle_gpu_asks_for_an_instance() -> None:
    """Breaks if a flat curve with GPU room does not first ask for one more instance."""
    changes = candidates(CONFIG, _flat_sweep(queue=0.0002, gpu=0.55), 0.05)  # type: ignore[arg-type]
    assert [(c.parameter, c.current, c.proposed) for c in changes][:1] == [
        ("instance_group[0].count", 2, 3)
    ]
    assert "the GPU is 55% busy" in changes[0].reason


def test_flat_curve_with_a_busy_gpu_and_no_waiting_does_not() -> None:
    """Breaks if a flat curve on a busy GPU with nothing queueing still gets one more
    instance (it would only add contention), or the other rules stop running beside it."""
    full_batches = candidates(CONFIG, _flat_sweep(queue=0.0002, gpu=0.95), 0.05)  # type: ignore[arg-type]
    assert full_batches == []  # nothing to change at all: batches of 6 of 4 possible
    small_batches = candidates(CONFIG, _flat_sweep(queue=0.0002, gpu=0.95, batch=1.5), 0.05)  # type: ignore[arg-type]
    assert [(c.parameter, c.current, c.proposed) for c in small_batches] == [(DELAY, 1000, 2000)]


def test_without_gpu_numbers_waiting_still_decides() -> None:
    """Breaks if, without GPU numbers, queueing requests no longer get one more instance."""
    waiting = candidates(CONFIG, _flat_sweep(queue=0.002, gpu=None), 0.05)  # type: ignore[arg-type]
    assert waiting[0].parameter == "instance_group[0].count"
    assert "requests wait 2.0 ms" in waiting[0].reason


def test_gpu_probe_reads_the_models_gpu_from_triton_metrics() -> None:
    """Breaks if the GPU probe stops reading the model's GPU, or raises when unreachable."""
    with Simulator(metrics_interval_s=0.2) as sim:
        probe = gpu_utilization_probe(sim.metrics_url, lambda: [1])
        value = probe()
    assert value is not None
    assert 0.0 <= value <= 1.0
    assert model_gpu_indices(CONFIG) == [0]
    assert gpu_utilization_probe("http://127.0.0.1:9/metrics", lambda: [0], timeout=0.5)() is None


def test_a_still_rising_curve_with_gpu_room_inside_the_budget_asks_for_an_instance() -> None:
    """Breaks if a rising curve with GPU room gets no instance first, or one with a busy
    GPU gets one anyway."""
    sweep = _flat_sweep(queue=0.0002, gpu=0.6, batch=1.5)
    rising = [replace(s, inferences_per_second=500.0 * s.level) for s in sweep.steps]  # type: ignore[attr-defined]
    result = judged(
        SweepSettings(url="http://127.0.0.1:1", model="m", levels=(1, 2, 4), budget_p95=0.05),
        rising,
        False,
        [],
    )
    assert result.knee is not None
    assert not result.knee.reached
    changes = candidates(CONFIG, result, 0.05)
    assert [(c.parameter, c.current, c.proposed) for c in changes] == [
        ("instance_group[0].count", 2, 3),
        (DELAY, 1000, 2000),  # batches of 1.5 of 8 possible: the raise comes after
    ]
    assert "still rising at 4" in changes[0].reason
    busy = judged(SweepSettings(url="http://127.0.0.1:1", model="m", levels=(1, 2, 4), budget_p95=0.05),
                   [replace(s, gpu_utilization=0.95) for s in rising], False, [])  # fmt: skip
    busy_changes = candidates(CONFIG, busy, 0.05)
    assert [(c.parameter, c.current, c.proposed) for c in busy_changes] == [(DELAY, 1000, 2000)]


def _delay_changes(config: dict[str, object], sweep: object) -> list[tuple[object, object]]:
    changes = candidates(config, sweep, 0.05)  # type: ignore[arg-type]
    return [(c.current, c.proposed) for c in changes if c.parameter == DELAY]


def test_requests_waiting_out_the_delay_inside_the_budget_halve_it_first() -> None:
    """Breaks if requests waiting out the queue delay do not get it halved first."""
    # 0.8 ms of queue against a 1 ms delay: the timer, not a full batch, sends them.
    sweep = _flat_sweep(queue=0.0008, gpu=0.95, batch=1.5)
    changes = candidates(CONFIG, sweep, 0.05)  # type: ignore[arg-type]
    assert (changes[0].parameter, changes[0].current, changes[0].proposed) == (DELAY, 1000, 500)
    assert "wait 0.80 ms of the 1 ms delay at 4" in changes[0].reason
    # The raise stays behind it as the next thing to try (batches of 1.5 of 4 possible).
    assert _delay_changes(CONFIG, sweep) == [(1000, 500), (1000, 2000)]


def test_a_short_queue_leaves_the_delay_alone() -> None:
    """Breaks if a short queue on a busy GPU still gets a queue delay change."""
    assert _delay_changes(CONFIG, _flat_sweep(queue=0.0002, gpu=0.95)) == []


def test_raising_the_delay_is_judged_against_the_rows_in_flight_not_max_batch() -> None:
    """Breaks if a longer delay is judged by max_batch_size instead of the rows in flight."""
    wide = {**CONFIG, "max_batch_size": 32}
    # Batches of 3 at concurrency 4: a closed loop of 4 can never fill 32, nor 16.
    assert _delay_changes(wide, _flat_sweep(queue=0.0002, gpu=0.95, batch=3.0)) == []
    # Batches of 1 when 4 rows could wait together: a longer wait can fill them.
    assert _delay_changes(wide, _flat_sweep(queue=0.0002, gpu=0.95, batch=1.0)) == [(1000, 2000)]
