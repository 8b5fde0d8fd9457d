"""The shared-GPU model on a fake clock: speed, saturation, utilisation, power, memory."""

from __future__ import annotations

import pytest

from tritonwatch.sim.gpu import OutOfGpuMemoryError, SharedGpu
from tritonwatch.sim.models import GpuSpec

pytestmark = pytest.mark.sim

SPEC = GpuSpec(
    uuid="GPU-00000000-0000-4000-8000-000000000001",
    memory_total=1000,
    memory_base=100,
    power_idle_watts=50,
    power_limit_watts=250,
)


def run_to_completion(gpu: SharedGpu) -> list[tuple[float, int]]:
    """Finishes every kernel; returns (finish time, kernel sequence) in order."""
    finished: list[tuple[float, int]] = []
    while (when := gpu.next_finish()) is not None:
        finished += [(when, kernel.sequence) for kernel in gpu.pop_finished(when)]
    return finished


def test_a_kernel_alone_runs_at_full_speed() -> None:
    """One kernel under capacity finishes after exactly its work."""
    gpu = SharedGpu(SPEC, now=0.0)
    gpu.begin(0.0, 0.010, occupancy=0.4)
    ((when, sequence),) = run_to_completion(gpu)
    assert when == pytest.approx(0.010)
    assert sequence == 0


def test_kernels_over_capacity_share_the_gpu() -> None:
    """Two kernels of occupancy 0.8 (Σ 1.6) both take 1.6× their work."""
    gpu = SharedGpu(SPEC, now=0.0)
    gpu.begin(0.0, 1.0, occupancy=0.8)
    gpu.begin(0.0, 1.0, occupancy=0.8)
    times = [when for when, _ in run_to_completion(gpu)]
    assert times == [pytest.approx(1.6), pytest.approx(1.6)]


def test_a_finishing_kernel_speeds_the_others_up() -> None:
    """Shares are recomputed when a kernel ends: the long one then runs at full speed."""
    gpu = SharedGpu(SPEC, now=0.0)
    gpu.begin(0.0, 0.5, occupancy=1.0)
    gpu.begin(0.0, 1.0, occupancy=1.0)
    # Both at half speed until t=1.0 (short one done), then 0.5 s of work left alone.
    assert [when for when, _ in run_to_completion(gpu)] == [pytest.approx(1.0), pytest.approx(1.5)]


@pytest.mark.parametrize(("instances", "throughput"), [(1, 1.0), (2, 2.0), (4, 4.0), (6, 4.0)])
def test_throughput_grows_with_instances_until_saturation(
    instances: int, throughput: float
) -> None:
    """Kernels of occupancy 0.25 and 1 s of work: throughput is min(n, 4) per second."""
    gpu = SharedGpu(SPEC, now=0.0)
    for _ in range(instances):
        gpu.begin(0.0, 1.0, occupancy=0.25)
    last = max(when for when, _ in run_to_completion(gpu))
    assert instances / last == pytest.approx(throughput)


def test_utilisation_power_and_energy_follow_the_busy_fraction() -> None:
    """0.3 occupancy for 1 s of a 2 s interval: utilisation 0.15, power and energy match."""
    gpu = SharedGpu(SPEC, now=0.0)
    gpu.begin(0.0, 1.0, occupancy=0.3)
    run_to_completion(gpu)
    sample = gpu.sample(2.0)
    assert sample.utilization == pytest.approx(0.15)
    assert sample.power_watts == pytest.approx(50 + 200 * 0.15)
    assert sample.energy_joules == pytest.approx(50 * 2.0 + 200 * 0.3)
    assert gpu.sample(4.0).utilization == 0.0
    assert gpu.last_sample().energy_joules == pytest.approx(100 + 60 + 100)


def test_background_work_counts_in_utilisation_and_slows_kernels() -> None:
    """Outside work at 0.8 plus a 0.5 kernel (Σ 1.3): the kernel takes 1.3× its work."""
    gpu = SharedGpu(SPEC, now=0.0)
    gpu.set_background(0.0, 0.8)
    gpu.begin(0.0, 1.0, occupancy=0.5)
    assert run_to_completion(gpu)[0][0] == pytest.approx(1.3)
    assert gpu.sample(2.6).utilization == pytest.approx((1.3 * 1.0 + 1.3 * 0.8) / 2.6)


def test_memory_is_base_plus_allocations_and_refuses_overcommit() -> None:
    """Allocations add to the base; one that does not fit raises and changes nothing."""
    gpu = SharedGpu(SPEC, now=0.0)
    gpu.allocate("a", 500)
    assert gpu.memory_used == 600
    with pytest.raises(OutOfGpuMemoryError, match="out of memory"):
        gpu.allocate("b", 401)
    assert gpu.memory_used == 600
    gpu.allocate("a", 0)
    assert gpu.memory_used == 100


def test_reset_counters_zeroes_energy() -> None:
    """A restart starts the energy counter again from zero."""
    gpu = SharedGpu(SPEC, now=0.0)
    gpu.sample(10.0)
    assert gpu.last_sample().energy_joules == pytest.approx(500.0)
    gpu.reset_counters(10.0)
    assert gpu.last_sample().energy_joules == 0.0


def test_an_aborted_kernel_releases_its_share() -> None:
    """A cancelled execution stops counting against the others."""
    gpu = SharedGpu(SPEC, now=0.0)
    doomed = gpu.begin(0.0, 10.0, occupancy=1.0)
    gpu.begin(0.0, 1.0, occupancy=1.0)
    gpu.abort(0.0, doomed)
    ((when, sequence),) = run_to_completion(gpu)
    assert when == pytest.approx(1.0)
    assert sequence == 1
