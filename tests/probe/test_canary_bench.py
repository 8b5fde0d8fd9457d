"""The canary's accuracy against the simulator's ground truth: a measurement, not a
behaviour check (``pytest -m bench``; benchmarks/canary_accuracy.py reports the figures)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from sim_process import SimProcess
from support import wait_until
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.runner import CanaryRunner
from tritonwatch.records.quantiles import quantiles
from tritonwatch.sim.testing import model_set_with
from tritonwatch.state.canary_board import CanaryBoard, SeriesSnapshot, latency_buckets

pytestmark = pytest.mark.bench

SLOW_LOGNORMAL = {
    "timing": {
        "compute_input": 0,
        "compute_input_per_item": 0,
        "compute_output": 0,
        "compute_output_per_item": 0,
        "compute_infer": "100ms",
        "compute_infer_per_item": 0,
        "noise_sigma": 0.25,
    },
    "dynamic_batching": None,
    "instance_group": {"count": 6, "kind": "KIND_GPU", "gpus": [0]},
    "gpu_occupancy": {"base": 0.05, "per_item": 0.0},
}


@pytest.fixture
def runner() -> Iterator[CanaryRunner]:
    runner = CanaryRunner(CanaryBoard(latency_buckets([0.05])))
    yield runner
    runner.stop()


def _series(runner: CanaryRunner) -> SeriesSnapshot:
    now = time.monotonic()
    return next(snap for snap in runner.board.snapshot(now) if snap.model == "simple")


def test_canary_p95_within_five_percent_of_the_servers_true_p95(runner: CanaryRunner) -> None:
    """100 ms log-normal service time (σ 0.25): the client's own ~2.5 ms stays within 5 %.

    The simulator runs in its own process so that client and server do not share a GIL."""
    with SimProcess(models=model_set_with(simple=SLOW_LOGNORMAL), seed=3) as sim:
        plan = CanaryPlan(
            target="sim", model="simple", version="", protocol="http",
            http_url=sim.http_url, grpc_url=f"grpc://{sim.grpc_url}", rate=15.0,
            poisson=False, timeout=1.5, max_in_flight=8, data="random",
        )  # fmt: skip
        runner.start([plan])
        wait_until(lambda: _series(runner).outcomes["success"] >= 90, 30, "90 successes")
        snap = _series(runner)
        runner.stop()
        truth = quantiles(sim.latency_samples("simple"), (0.95,))[0.95]
    measured = snap.window_quantiles["5m"][0.95]
    assert truth > 0.1
    assert measured == pytest.approx(truth, rel=0.05)
    assert measured >= truth  # end to end can only add time
