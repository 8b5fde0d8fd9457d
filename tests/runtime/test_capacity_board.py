"""CapacityBoard: each scrape's load against the last sweep's capacity, on a fake clock —
headroom, the trend's exhaustion, a stale capacity bringing the sweep forward once,
desired replicas per service, and cost with and without a price."""

from __future__ import annotations

import math
from typing import Any

import pytest

from sweep_support import judged, plain_step
from tritonwatch.config.schema import Config
from tritonwatch.records.capacity_records import CapacityReading
from tritonwatch.records.observations import ModelRates, TritonGpuRates
from tritonwatch.records.sweep_records import StepResult, SweepBoard, SweepSettings
from tritonwatch.records.target_state import ModelState, TargetState
from tritonwatch.runtime.capacity_board import CapacityBoard

INTERVAL = 15.0
BUDGET = 0.1


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def rates(load: float, compute: float = 0.025, interval: float = INTERVAL) -> ModelRates:
    """A window of ``load`` requests/s of one row each, every one computed in ``compute`` s."""
    return ModelRates(
        model="m",
        version="",
        interval_seconds=interval,
        counters_reset=False,
        requests_per_second=load,
        inferences_per_second=load,
        executions_per_second=load,
        failures_per_second=0.0,
        failures_per_second_by_reason={},
        batch_size_average=1.0,
        request_seconds_average=compute,
        queue_seconds_average=0.0,
        compute_input_seconds_average=0.0,
        compute_infer_seconds_average=compute,
        compute_output_seconds_average=0.0,
        pending_requests=0.0,
    )


def gpu(uuid: str) -> TritonGpuRates:
    return TritonGpuRates(uuid, INTERVAL, 0.5, None, None, None, None, None, None)


def state(
    target: str, loads: dict[str, float], *, compute: float = 0.025, gpus: int = 0
) -> TargetState:
    models = {
        name: ModelState(name, rates=rates(load, compute), canary_requests_per_second=1.0)
        for name, load in loads.items()
    }
    devices = {f"GPU-{i}": gpu(f"GPU-{i}") for i in range(gpus)}
    return TargetState(target, {}, 0, models, devices, {})


def step(level: float, ips: float, p95: float, compute: float) -> StepResult:
    return plain_step(level, ips, p95, compute=compute)


def swept(board: SweepBoard, target: str, model: str = "m", *, finished_at: float = 500.0) -> None:
    """A sweep of a 25 ms model: in budget up to 40/s (closed loop, unchecked)."""
    settings = SweepSettings(
        url="http://127.0.0.1:1", model=model, levels=(1, 2, 4), budget_p95=BUDGET
    )
    steps = [step(1, 20, 0.03, 0.025), step(2, 40, 0.06, 0.025), step(4, 41, 0.2, 0.025)]
    board.record((target, model), judged(settings, steps), finished_at)


def config(**capacity: Any) -> Config:
    return Config.model_validate(
        {
            "capacity": capacity,
            "targets": [
                {
                    "name": "a",
                    "url": "http://127.0.0.1:1",
                    "service": "triton",
                    "models": [{"name": "m"}],
                },
                {
                    "name": "b",
                    "url": "http://127.0.0.1:2",
                    "service": "triton",
                    "models": [{"name": "m"}],
                    "price": {"per_gpu_hour": 3.6},
                },
                {
                    "name": "c",
                    "url": "http://127.0.0.1:3",
                    "models": [{"name": "m"}, {"name": "n"}],
                },
            ],
        }
    )


class Forward:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, target: str, model: str) -> None:
        self.calls.append((target, model))


def board_with(
    clock: Clock, *, swept_on: set[tuple[str, str]] | None = None, **capacity: Any
) -> tuple[CapacityBoard, SweepBoard, Forward]:
    sweeps, forward = SweepBoard(), Forward()
    board = CapacityBoard(sweeps, forward, clock=clock)
    board.apply(config(**capacity), swept_on or set())
    return board, sweeps, forward


def reading(board: CapacityBoard, target: str, model: str = "m") -> CapacityReading:
    (found,) = [r for r in board.readings() if (r.target, r.model) == (target, model)]
    return found


def test_headroom_is_one_minus_load_over_capacity_and_a_flat_load_never_fills() -> None:
    """Fails if headroom is not 1 - load / capacity from the sweep's capacity, or a flat
    load gets a finite exhaustion time."""
    clock = Clock()
    board, sweeps, _ = board_with(clock)
    swept(sweeps, "a")
    for _ in range(10):
        board.observe(state("a", {"m": 10.0}))
        clock.now += INTERVAL
    got = reading(board, "a")
    assert got.capacity_per_second == 40.0 and got.load == 10.0 and got.canary_load == 1.0
    assert got.headroom == pytest.approx(0.75)
    assert got.exhaustion_seconds == math.inf and got.slope == pytest.approx(0.0, abs=1e-12)


def test_a_rising_load_is_forecast_to_exhaust_when_its_line_reaches_capacity() -> None:
    """Fails if the forecast is not the trend over the window reaching capacity: +0.01/s
    from 20/s reaches 40/s in 2000 s; samples older than the window are dropped."""
    clock = Clock()
    board, sweeps, _ = board_with(clock, trend_window="10m")
    swept(sweeps, "a")
    board.observe(state("a", {"m": 35.0}))  # an old outlier, past the window by the end
    clock.now += 700.0
    for i in range(40):
        board.observe(state("a", {"m": 20.0 + 0.01 * INTERVAL * i}))
        if i < 39:
            clock.now += INTERVAL
    got = reading(board, "a")
    assert got.slope == pytest.approx(0.01)
    assert got.load == pytest.approx(25.85)
    assert got.exhaustion_seconds == pytest.approx((40.0 - 25.85) / 0.01)
    assert got.forecast == pytest.approx(25.85 + 0.01 * 4 * 3600)


def test_no_capacity_without_a_sweep_but_the_load_is_still_read() -> None:
    """Fails if a model never swept gets a capacity, a headroom or a forecast."""
    clock = Clock()
    board, _, _ = board_with(clock)
    board.observe(state("a", {"m": 12.0}))
    got = reading(board, "a")
    assert got.capacity is None and got.headroom is None and got.load == 12.0
    assert got.exhaustion_seconds == math.inf


def test_a_drifted_compute_time_marks_the_capacity_stale_and_brings_the_sweep_forward_once() -> (
    None
):
    """Fails if compute 40 % slower than the sweep's at the same load is not stale, if the
    sweep is not brought forward, or is brought forward again for the same sweep."""
    clock = Clock()
    board, sweeps, forward = board_with(clock, swept_on={("a", "m")})
    swept(sweeps, "a")
    board.observe(state("a", {"m": 20.0}, compute=0.026))
    assert reading(board, "a").drift == pytest.approx(0.04) and not reading(board, "a").stale
    assert forward.calls == []
    for _ in range(3):
        clock.now += INTERVAL
        board.observe(state("a", {"m": 20.0}, compute=0.035))
    got = reading(board, "a")
    assert got.stale and got.drift is not None and got.drift > 0.2
    assert forward.calls == [("a", "m")]
    swept(sweeps, "a", finished_at=900.0)  # the new sweep: still stale, brought forward anew
    clock.now += INTERVAL
    board.observe(state("a", {"m": 20.0}, compute=0.060))
    assert forward.calls == [("a", "m"), ("a", "m")]


def test_no_sweep_is_brought_forward_for_a_model_without_scheduled_sweeps() -> None:
    """Fails if a stale capacity asks for a sweep that is not scheduled."""
    clock = Clock()
    board, sweeps, forward = board_with(clock)
    swept(sweeps, "a")
    board.observe(state("a", {"m": 20.0}, compute=0.05))
    assert reading(board, "a").stale and forward.calls == []


def test_desired_replicas_add_the_loads_of_a_service_and_a_lone_target_is_its_own() -> None:
    """Fails if the targets of one service are not summed against the lowest capacity, or a
    target without a service is not counted alone."""
    clock = Clock()
    board, sweeps, _ = board_with(clock, target_utilisation=0.5, spare_replicas=1)
    swept(sweeps, "a")
    swept(sweeps, "c")
    board.observe(state("a", {"m": 30.0}))
    board.observe(state("b", {"m": 25.0}, gpus=2))
    board.observe(state("c", {"m": 5.0, "n": 1.0}))
    wanted = {(w.service, w.model): w for w in board.replicas()}
    assert set(wanted) == {("triton", "m"), ("c", "m")}
    assert wanted[("triton", "m")].replicas == 4  # ceil(55 / (40 × 0.5)) + 1
    assert wanted[("triton", "m")].targets == ("a", "b")
    assert wanted[("c", "m")].replicas == 2  # ceil(5 / 20) + 1


def test_cost_with_a_gpu_price_and_gpu_seconds_without_one() -> None:
    """Fails if a priced target's cost per 1k is not its GPUs' price over its load, or an
    unpriced target with GPUs gets no GPU-seconds (and one without GPUs gets any)."""
    clock = Clock()
    board, sweeps, _ = board_with(clock)
    swept(sweeps, "b")
    board.observe(state("b", {"m": 20.0}, gpus=2))  # 2 × 3.60/h = 0.002/s, all of it m's
    priced = reading(board, "b")
    assert priced.cost_per_1k == pytest.approx({"load": 0.1, "capacity": 0.05})
    assert priced.gpu_seconds_per_1k == {}
    board.observe(state("a", {"m": 20.0}, gpus=1))
    assert reading(board, "a").gpu_seconds_per_1k == pytest.approx({"load": 50.0})
    board.observe(state("c", {"m": 3.0, "n": 1.0}))
    assert reading(board, "c").gpu_seconds_per_1k == {} and reading(board, "c").cost_per_1k == {}


def test_a_model_dropped_by_a_reload_loses_its_samples_and_reading() -> None:
    """Fails if a model no longer watched keeps a reading (its series would stay exported)."""
    clock = Clock()
    board, _, _ = board_with(clock)
    board.observe(state("c", {"m": 3.0, "n": 1.0}))
    assert {(r.target, r.model) for r in board.readings()} == {("c", "m"), ("c", "n")}
    smaller = Config.model_validate(
        {"targets": [{"name": "c", "url": "http://127.0.0.1:3", "models": [{"name": "n"}]}]}
    )
    board.apply(smaller, set())
    assert {(r.target, r.model) for r in board.readings()} == {("c", "n")}


def test_no_load_sample_while_the_model_is_swept_nor_from_the_scrape_after() -> None:
    """Fails if the sweep's own saturating load enters the trend (or the headroom): the
    samples during the sweep and from the first scrape after it are left out, and the
    last production load is held meanwhile (the series must not vanish mid-sweep)."""
    clock = Clock()
    board, sweeps, _ = board_with(clock)
    swept(sweeps, "a")
    for load, sweeping in [(10.0, None), (10.0, True), (40.0, None), (39.0, False), (10.0, None)]:
        if sweeping is not None:
            board.set_sweeping("a", "m", sweeping)
        board.observe(state("a", {"m": load}))
        clock.now += INTERVAL
    got = reading(board, "a")
    assert got.slope == pytest.approx(0.0, abs=1e-12)  # only the two 10/s samples
    assert got.load == 10.0
    board.set_sweeping("a", "m", True)
    board.observe(state("a", {"m": 40.0}))
    held = reading(board, "a")  # the last production load stands while the sweep runs
    assert held.load == 10.0 and held.headroom == pytest.approx(0.75)
