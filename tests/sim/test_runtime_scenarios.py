"""Scenarios switched at run time take their whole effect, memory footprints included."""

from __future__ import annotations

import urllib.request

import pytest

from tritonwatch.sim.server import Simulator

pytestmark = pytest.mark.sim


def _memory_used(sim: Simulator, gpu_suffix: str) -> float:
    sim.poll_metrics()
    text = urllib.request.urlopen(sim.metrics_url, timeout=5).read().decode()
    line = next(
        row
        for row in text.splitlines()
        if row.startswith("nv_gpu_memory_used_bytes") and gpu_suffix in row
    )
    return float(line.rsplit(" ", 1)[1])


def test_memory_scarce_applied_to_one_model_at_run_time_fills_its_gpu() -> None:
    """memory-scarce set on a running model takes its GPU's memory from under 5 % to 93 %."""
    with Simulator() as sim:
        before = _memory_used(sim, '0002"')
        sim.set_scenario("memory-scarce", "text_identity")
        after = _memory_used(sim, '0002"')
    total = 150754820096
    assert before / total < 0.05
    assert abs(after / total - 0.93) < 0.01
