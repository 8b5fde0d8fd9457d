"""The simulator's host CPU reading (Triton's ``nv_cpu_*``), from ``/proc``-shaped files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from support import sample_value
from tritonwatch.sim.metrics import HostCpu
from tritonwatch.sim.server import Simulator
from tritonwatch.sim.testing import fetch

MEMINFO = "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    400 kB\n"


def _proc(root: Path, busy: int, idle: int) -> Path:
    """A ``/proc`` whose ``stat`` says the CPU spent ``busy`` and ``idle`` ticks so far."""
    root.mkdir(exist_ok=True)
    (root / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\n")
    (root / "meminfo").write_text(MEMINFO)
    return root


def test_utilisation_is_the_busy_share_between_polls_and_memory_what_is_not_available(
    tmp_path: Path,
) -> None:
    """Breaks if the utilisation is not the busy share of the ticks between two polls
    (as Triton's CPU poller computes it), or used memory is not total minus available."""
    proc = _proc(tmp_path / "proc", busy=100, idle=100)
    host = HostCpu(proc)
    assert host.poll().utilization == 0.0  # one reading: nothing to compare yet
    _proc(proc, busy=190, idle=110)  # 90 of the next 100 ticks busy
    sample = host.poll()
    assert sample.utilization == pytest.approx(0.9)
    assert (sample.memory_total_bytes, sample.memory_used_bytes) == (1000 * 1024, 600 * 1024)


def test_a_pinned_utilisation_holds_whatever_the_host_does(tmp_path: Path) -> None:
    """Breaks if a pinned reading follows the host's ticks (a busy CI host would then
    block the advice of a test that pins it), or stops reading the memory."""
    proc = _proc(tmp_path / "proc", busy=100, idle=100)
    host = HostCpu(proc, pinned_utilization=0.25)
    assert host.last.utilization == 0.25  # before any poll as well
    host.poll()
    _proc(proc, busy=200, idle=100)  # every tick busy
    sample = host.poll()
    assert sample.utilization == 0.25
    assert sample.memory_used_bytes == 600 * 1024


def test_the_simulator_exports_the_pinned_utilisation(
    start_sim: Callable[..., Simulator],
) -> None:
    """Breaks if ``Simulator(host_cpu_utilization=...)`` does not reach its ``/metrics``."""
    sim = start_sim(host_cpu_utilization=0.25, metrics_interval_s=0.1)
    assert sample_value(fetch(sim.metrics_url), "nv_cpu_utilization") == 0.25
