"""The sweep's knee and budget stop measured live on the simulator: throughput ratios
and latencies under real load, so measurements (``pytest -m bench``); test_sweep.py
holds the same verdicts on recorded steps."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sim_process import SimProcess
from sweep_support import TWO_INSTANCES
from tritonwatch.analysis.sweep_verdict import judge_sweep
from tritonwatch.records.sweep_records import SweepSettings
from tritonwatch.sim.testing import model_set_with
from tritonwatch.sweep.load_sweep import SweepRunner

pytestmark = pytest.mark.bench


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess(models=model_set_with(simple=TWO_INSTANCES)) as process:
        yield process


def test_live_sweep_finds_the_knee_where_throughput_flattens(sim: SimProcess) -> None:
    """The sweep finds the knee where throughput flattens, errorless, with the server's stages."""
    settings = SweepSettings(
        url=sim.http_url, model="simple", levels=(1, 2, 4, 8, 16), window_seconds=0.7
    )
    result = judge_sweep(SweepRunner(settings).run())
    by_level = {s.level: s for s in result.steps}
    assert [s.level for s in result.steps] == [1, 2, 4, 8, 16]
    assert all(s.errors == 0 and s.requests > 50 for s in result.steps)
    assert result.knee is not None
    assert result.knee.reached
    # 2 instances of 4 ms: the server saturates at 2-4 in flight; a loaded host's
    # client can hold the rise back to 8 (16 is then surely on the plateau)
    assert result.knee.concurrency in (2, 4, 8)
    # Flat after the knee, while the queue (and so p95) keeps growing. The server's
    # ceiling is 2 / 4 ms = 500/s; on two shared cores the simulator's own Python can hold
    # it near 350-420/s, so "flat" is: never above the ceiling, and doubling the
    # concurrency from 8 to 16 buys far less than double (a CI run read 347 -> 413/s).
    capacity = 2 / 0.004
    assert by_level[16].inferences_per_second <= 1.05 * capacity
    assert by_level[16].inferences_per_second < 1.4 * by_level[8].inferences_per_second
    assert by_level[16].p95 > by_level[8].p95
    assert by_level[16].p95 > 1.5 * by_level[2].p95
    assert by_level[16].server is not None
    assert (
        by_level[16].server.stage_seconds["queue"]
        > by_level[16].server.stage_seconds["compute_infer"]
    )
    assert by_level[1].server is not None
    assert by_level[1].server.stage_seconds["compute_infer"] == pytest.approx(0.004, rel=0.25)
    assert by_level[1].server.batch_size_average == 1.0


def test_live_sweep_stops_at_the_budget_and_reports_its_operating_point(sim: SimProcess) -> None:
    """The sweep stops at the first step over the p95 budget and reports one within it."""
    settings = SweepSettings(
        url=f"grpc://{sim.grpc_url}", protocol="grpc", model="simple",
        levels=(1, 2, 4, 8, 16, 32), window_seconds=0.5, budget_p95=0.025,
    )  # fmt: skip
    result = judge_sweep(SweepRunner(settings).run())
    assert result.stopped_at_budget
    assert result.steps[-1].p95 > 0.025
    assert all(step.p95 <= 0.025 for step in result.steps[:-1])
    # 16 in flight on 2 instances of 4 ms queue 8 deep: over 32 ms. (The simulator's gRPC
    # at one in flight takes 6 ms, 11 ms on a loaded host — perf_analyzer sees the same —
    # so the budget leaves room for level 1.)
    assert result.steps[-1].level <= 16
    assert result.operating_point is not None
    assert result.operating_point.p95 <= 0.025
