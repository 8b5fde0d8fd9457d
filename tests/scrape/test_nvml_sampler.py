"""The NVML sampler against the H200 recording replayed by FakeNvml, and failure modes."""

from __future__ import annotations

import json
from typing import Any

import pynvml
import pytest
from structlog.testing import capture_logs

from support import fixtures_dir
from tritonwatch.records.observations import GpuProcess, GpuSample
from tritonwatch.scrape.nvml_fake import FakeNvml
from tritonwatch.scrape.nvml_sampler import NvmlSampler

H200 = "GPU-7c754c05-34be-83d3-deff-8175702c18c4"
TOTAL = 150754820096  # memory_info_v1.total
IDLE_USED = 644939776  # v1 used = v2 reserved, idle


@pytest.fixture(scope="module")
def probe() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((fixtures_dir() / "nvml" / "h200_probe.json").read_text())
    return data


@pytest.fixture
def fake(probe: dict[str, Any]) -> FakeNvml:
    return FakeNvml(probe)


@pytest.fixture
def collector(fake: FakeNvml) -> NvmlSampler:
    collector = NvmlSampler(fake, clock=fake.now)
    assert collector.start()
    return collector


def only(samples: tuple[GpuSample, ...]) -> GpuSample:
    assert len(samples) == 1
    return samples[0]


def test_idle_readings_in_base_units(collector: NvmlSampler) -> None:
    """Row 0 of the idle phase: 81564 mW, 2488576 mJ, 345 MHz, 36 °C, 0 % busy."""
    sample = only(collector.sample())
    assert (sample.uuid, sample.index, sample.name, sample.at) == (H200, 0, "NVIDIA H200", 0.0)
    assert sample.utilization_ratio == 0 and sample.memory_utilization_ratio == 0
    assert sample.power_watts == pytest.approx(81.564)
    assert sample.power_limit_watts == pytest.approx(700.0)
    assert sample.energy_joules == pytest.approx(2488.576)
    assert sample.sm_clock_hertz == 345e6 and sample.memory_clock_hertz == 3201e6
    assert sample.temperature_celsius == 36
    assert (sample.memory_total_bytes, sample.memory_used_bytes) == (TOTAL, IDLE_USED)
    assert sample.memory_reserved_bytes == IDLE_USED  # v2: all of it is the reservation
    assert sample.clock_event_reasons == {"gpu_idle"}
    assert sample.processes == ()
    assert sample.failures == ()


def test_fan_speed_is_not_supported_and_everything_else_is_there(collector: NvmlSampler) -> None:
    """The H200 answers NotSupported for the fan (fixture): None, remembered, rest present."""
    sample = only(collector.sample())
    assert sample.fan_speed_ratio is None and sample.unsupported == {"fan_speed"}
    assert sample.failures == ()


def test_full_load_readings(fake: FakeNvml, collector: NvmlSampler) -> None:
    """duty_100 row 17 (t=23.298 s): 98 % / 25 %, 544934 mW, 1500 MHz, 59 °C, one process."""
    fake.seek("duty_100", 17)
    sample = only(collector.sample())
    assert sample.at == pytest.approx(23.298)
    assert sample.utilization_ratio == pytest.approx(0.98)
    assert sample.memory_utilization_ratio == pytest.approx(0.25)
    assert sample.power_watts == pytest.approx(544.934)
    assert sample.energy_joules == pytest.approx(7392.012)
    assert sample.sm_clock_hertz == 1500e6 and sample.temperature_celsius == 59
    assert sample.memory_used_bytes == 1839071232
    assert sample.memory_reserved_bytes == IDLE_USED
    # The recording holds no pid or per-process memory: the fake derives them.
    assert sample.processes == (GpuProcess(1000, 1839071232 - IDLE_USED),)
    assert sample.clock_event_reasons == frozenset()


def test_utilisation_and_power_rise_under_load_and_fall_after(
    fake: FakeNvml, collector: NvmlSampler
) -> None:
    """Replays the whole recording sample by sample, as the daemon's job would."""
    by_phase: dict[str, list[GpuSample]] = {}
    phases = sorted(fake.phase_starts.items(), key=lambda item: item[1])
    for number, (phase, start) in enumerate(phases):
        end = phases[number + 1][1] if number + 1 < len(phases) else len(fake.rows)
        for row in range(start, end):
            fake.row = row
            by_phase.setdefault(phase, []).append(only(collector.sample()))
    assert [len(by_phase[p]) for p, _ in phases] == [16, 32, 32, 16]
    loaded = [s for s in by_phase["duty_100"] if s.at >= 22.785]  # the matmul started here
    assert min(s.utilization_ratio or 0 for s in loaded) >= 0.98
    assert max(s.power_watts or 0 for s in loaded) == pytest.approx(695.406)
    assert max(s.utilization_ratio or 0 for s in by_phase["idle"]) == 0
    assert max(s.power_watts or 0 for s in by_phase["idle"]) == pytest.approx(81.564)
    tail = by_phase["after"][-1]
    assert (tail.utilization_ratio, tail.power_watts) == (0, pytest.approx(82.065))
    energies = [s.energy_joules or 0 for p, _ in phases for s in by_phase[p]]
    assert energies == sorted(energies)  # a counter: never goes down


def test_gpm_ratios_from_two_samples(fake: FakeNvml, collector: NvmlSampler) -> None:
    """First GPM sample: nothing yet. Next one 1 s later (rows 17..20 at 98, 99, 98, 100 %):
    the fake reports 0.9, 0.5 and 0.8 of their mean, 98.75 %."""
    fake.seek("duty_100", 16)
    first = only(collector.sample())
    assert (first.sm_active_ratio, first.sm_occupancy_ratio, first.tensor_active_ratio) == (
        None,
        None,
        None,
    )
    fake.step(4)
    second = only(collector.sample())
    assert second.sm_active_ratio == pytest.approx(0.9875 * 0.9)
    assert second.sm_occupancy_ratio == pytest.approx(0.9875 * 0.5)
    assert second.tensor_active_ratio == pytest.approx(0.9875 * 0.8)


def test_gpm_waits_for_100_ms_between_samples(fake: FakeNvml) -> None:
    """GPM metrics wait 100 ms between samples: too soon gives none and keeps the first."""
    now = [10.0]
    collector = NvmlSampler(fake, clock=lambda: now[0])
    collector.start()
    fake.seek("duty_100", 16)
    collector.sample()
    fake.step(4)
    now[0] = 10.05  # too soon: no metrics, the first GPM sample is kept
    assert only(collector.sample()).sm_active_ratio is None
    assert fake.calls.count("nvmlGpmSampleGet") == 1
    now[0] = 10.2
    assert only(collector.sample()).sm_active_ratio == pytest.approx(0.9875 * 0.9)


def test_not_supported_leaves_that_reading_none_and_is_not_asked_again(
    fake: FakeNvml, collector: NvmlSampler
) -> None:
    """A NotSupported reading stays None without a failure and is never asked again."""
    fake.inject("nvmlDeviceGetPowerUsage", pynvml.NVMLError_NotSupported, times=None)
    for _ in range(3):
        sample = only(collector.sample())
        assert sample.power_watts is None and sample.unsupported == {"fan_speed", "power"}
        assert sample.failures == () and sample.energy_joules == pytest.approx(2488.576)
    assert fake.calls.count("nvmlDeviceGetPowerUsage") == 1


def test_a_failed_call_loses_only_its_reading_and_is_counted(
    fake: FakeNvml, collector: NvmlSampler
) -> None:
    """GpuIsLost on energy (twice) and Unknown on utilisation (once): None, recorded,
    counted, logged once each; every other reading is kept; the next sample recovers."""
    fake.inject("nvmlDeviceGetTotalEnergyConsumption", pynvml.NVMLError_GpuIsLost, times=2)
    fake.inject("nvmlDeviceGetUtilizationRates", pynvml.NVMLError_Unknown)
    with capture_logs() as logs:
        failed = only(collector.sample())
        collector.sample()  # energy fails again: counted, not logged again
    assert [(log["event"], log["query"]) for log in logs] == [
        ("nvml_query_failed", "utilization"),
        ("nvml_query_failed", "energy"),
    ]
    assert failed.energy_joules is None and failed.utilization_ratio is None
    assert failed.failures == (
        ("utilization", "NVMLError_Unknown"),
        ("energy", "NVMLError_GpuIsLost"),
    )
    assert failed.power_watts == pytest.approx(81.564)  # the rest is still read
    fake.step()
    recovered = only(collector.sample())
    assert recovered.energy_joules == pytest.approx(2513.006) and recovered.failures == ()
    assert dict(collector.state().query_failures) == {
        (H200, "utilization", "NVMLError_Unknown"): 1,
        (H200, "energy", "NVMLError_GpuIsLost"): 2,
    }


def test_a_driver_without_an_unversioned_call_fails_that_query_only(
    fake: FakeNvml, collector: NvmlSampler
) -> None:
    """pynvml raises NVMLLibraryMismatchError, not an NVMLError, for such calls."""
    fake.inject("nvmlDeviceGetComputeRunningProcesses", pynvml.NVMLLibraryMismatchError)
    sample = only(collector.sample())
    assert sample.processes is None and sample.power_watts == pytest.approx(81.564)
    assert sample.failures == (("processes", "NVMLLibraryMismatchError"),)


def test_no_nvml_library_disables_the_collector_with_one_log_line() -> None:
    """Without the NVML library the collector disables itself with one line saying why."""
    with capture_logs() as logs:
        collector = NvmlSampler(FakeNvml.missing())
        assert collector.start() is False
        assert collector.sample() == ()
        collector.close()
    assert not collector.enabled
    assert "NVMLError_LibraryNotFound" in (collector.disabled_reason or "")
    assert [log["event"] for log in logs] == ["nvml_disabled"]
    assert collector.state().samples == () and not collector.state().enabled


def test_the_real_bindings_never_raise_on_this_machine() -> None:
    """With the real pynvml: a GPU host starts, a CPU-only host is disabled, nothing raises."""
    collector = NvmlSampler(pynvml)
    try:
        if collector.start():
            assert all(sample.uuid for sample in collector.sample())
        else:
            assert collector.disabled_reason
            assert collector.sample() == ()
    finally:
        collector.close()


def test_mig_devices_are_enumerated_through_mig_handles(probe: dict[str, Any]) -> None:
    """MIG devices are found through MIG handles, each with its parent, empty slots skipped."""
    fake = FakeNvml(probe, mig_devices=2)
    collector = NvmlSampler(fake, clock=fake.now)
    collector.start()
    parent, *migs = collector.sample()
    assert parent.uuid == H200 and parent.mig_index is None
    assert [(m.index, m.mig_index, m.parent_uuid) for m in migs] == [(0, 0, H200), (0, 1, H200)]
    assert all(m.uuid.startswith("MIG-") and m.uuid != H200 for m in migs)
    for mig in migs:
        assert mig.utilization_ratio is None and "utilization" in mig.unsupported
        assert mig.memory_total_bytes == TOTAL // 7
        assert mig.failures == ()
    assert fake.calls.count("nvmlDeviceGetMigDeviceHandleByIndex") == 7  # empty slots skipped


def test_older_calls_are_used_when_the_driver_lacks_the_newer_ones(
    fake: FakeNvml, collector: NvmlSampler
) -> None:
    """An older driver's missing calls fall back to the older ones, not to failures."""
    fake.inject("nvmlDeviceGetTemperatureV", pynvml.NVMLError_FunctionNotFound, times=None)
    fake.inject("nvmlDeviceGetMemoryInfo", pynvml.NVMLError_FunctionNotFound)  # the v2 call
    sample = only(collector.sample())
    assert sample.temperature_celsius == 36 and "nvmlDeviceGetTemperature" in fake.calls
    assert (sample.memory_used_bytes, sample.memory_reserved_bytes) == (IDLE_USED, None)
    assert sample.failures == ()


def test_close_frees_gpm_buffers_and_shuts_down(fake: FakeNvml, collector: NvmlSampler) -> None:
    """Closing frees both GPM buffers and shuts NVML down; a new start works again."""
    collector.sample()
    collector.close()
    assert not fake.initialized and not collector.enabled
    assert fake.calls.count("nvmlGpmSampleFree") == 2
    assert collector.sample() == ()
    assert collector.start() and only(collector.sample()).uuid == H200


def test_fake_replays_in_real_time_when_given_a_clock(probe: dict[str, Any]) -> None:
    """For demos: the row follows the clock and the recording loops."""
    now = [100.0]
    fake = FakeNvml(probe, clock=lambda: now[0])
    collector = NvmlSampler(fake, clock=lambda: now[0])
    collector.start()
    assert only(collector.sample()).utilization_ratio == 0
    now[0] += 24.06  # the row at t=24.059: 100 % busy
    assert only(collector.sample()).utilization_ratio == 1.0
    now[0] += 35.122  # one loop of the 35.122 s recording later: the same row
    assert only(collector.sample()).utilization_ratio == 1.0


def test_the_fake_refuses_calls_before_init(fake: FakeNvml) -> None:
    """The fake NVML refuses calls before init, as the real library does."""
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
