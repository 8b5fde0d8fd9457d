"""The GPU families on a real registry: promtool-clean, right values, one series per GPU."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from support import assert_promtool_clean, exposition, fixtures_dir, sample_value
from tritonwatch.export.gpu_metrics import GpuMetricsCollector, gpu_index_label
from tritonwatch.records.observations import GpuSample, NvmlState, TritonGpuRates
from tritonwatch.scrape.nvml_fake import FakeNvml
from tritonwatch.scrape.nvml_sampler import NvmlSampler

pytestmark = pytest.mark.real

H200 = "GPU-7c754c05-34be-83d3-deff-8175702c18c4"
REMOTE = "GPU-8331ed5e-e44e-72c7-fba5-ed5d48487989"  # the T4 of triton_metrics/sample_05


def triton_gpu(uuid: str, utilization: float) -> TritonGpuRates:
    return TritonGpuRates(
        gpu_uuid=uuid,
        interval_seconds=15.0,
        utilization_ratio=utilization,
        memory_used_bytes=4930404352,
        memory_total_bytes=15842934784,
        power_watts=27.444,
        power_limit_watts=70.0,
        energy_joules=21386.444,
        energy_watts=26.17,
    )


@pytest.fixture
def loaded_nvml() -> NvmlSampler:
    """The H200 at full load, after two samples (so GPM ratios exist), MIG devices on."""
    fake = FakeNvml.from_file(fixtures_dir() / "nvml" / "h200_probe.json", mig_devices=1)
    collector = NvmlSampler(fake, clock=fake.now)
    collector.start()
    fake.seek("duty_100", 16)
    collector.sample()
    fake.step(4)  # row 20, t=24.059 s: 100 %, 7937143 mJ, 59 °C
    fake.inject("nvmlDeviceGetPowerUsage", FakeNvml.NVMLError_GpuIsLost)
    collector.sample()
    return collector


def test_nvml_and_triton_gpus_pass_promtool(loaded_nvml: NvmlSampler) -> None:
    """NVML and Triton GPUs pass promtool with right values, a lost reading absent, no double."""
    triton = {H200: triton_gpu(H200, 0.97), REMOTE: triton_gpu(REMOTE, 0.25)}
    text = exposition(GpuMetricsCollector(loaded_nvml.state, lambda: triton))
    assert_promtool_clean(text)

    local = [("gpu", H200), ("gpu_index", "0")]
    assert (
        sample_value(text, "tritonwatch_gpu_utilization_ratio", [*local, ("source", "nvml")]) == 1.0
    )
    assert (
        sample_value(text, "tritonwatch_gpu_utilization_ratio", [*local, ("source", "triton")])
        == 0.97
    )
    assert sample_value(text, "tritonwatch_gpu_sm_clock_hertz", local) == 1500e6
    assert sample_value(text, "tritonwatch_gpu_energy_joules_total", local) == pytest.approx(
        7937.143
    )
    assert sample_value(text, "tritonwatch_gpu_sm_active_ratio", local) == pytest.approx(0.88875)
    assert sample_value(text, "tritonwatch_gpu_temperature_celsius", local) == 59
    reason = [*local, ("reason", "gpu_idle")]
    assert sample_value(text, "tritonwatch_gpu_clock_event_reasons", reason) == 0
    process = [*local, ("pid", "1000")]
    assert sample_value(text, "tritonwatch_gpu_process_memory_used_bytes", process) == 1194131456
    # The lost power reading is counted, and absent rather than stale.
    failure = [*local, ("query", "power"), ("error", "NVMLError_GpuIsLost")]
    assert sample_value(text, "tritonwatch_nvml_query_failures_total", failure) == 1
    assert sample_value(text, "tritonwatch_gpu_power_watts", local) is None

    # A GPU only Triton reports (another host): its gauges come from Triton.
    remote = [("gpu", REMOTE), ("gpu_index", "")]
    assert sample_value(text, "tritonwatch_gpu_memory_used_bytes", remote) == 4930404352
    assert sample_value(text, "tritonwatch_gpu_power_watts", remote) == 27.444
    assert sample_value(text, "tritonwatch_gpu_energy_joules_total", remote) == 21386.444
    # A GPU both see: one memory series (NVML's), not two.
    assert text.count(f'tritonwatch_gpu_memory_total_bytes{{gpu="{H200}"') == 1


def test_mig_devices_get_their_own_series(loaded_nvml: NvmlSampler) -> None:
    """A MIG device gets its own series, indexed 0:0, with its memory and parent GPU."""
    text = exposition(GpuMetricsCollector(loaded_nvml.state))
    mig = next(s for s in loaded_nvml.state().samples if s.mig_index is not None)
    assert gpu_index_label(mig) == "0:0"
    labels = [("gpu", mig.uuid), ("gpu_index", "0:0")]
    assert sample_value(text, "tritonwatch_gpu_memory_total_bytes", labels) == 150754820096 // 7
    info = [*labels, ("name", "NVIDIA H200 MIG 1g.18gb"), ("parent_gpu", H200)]
    assert sample_value(text, "tritonwatch_gpu_info", info) == 1


def test_without_nvml_or_triton_the_exposition_is_empty_but_valid() -> None:
    """Without NVML or Triton GPUs the exposition holds no GPU series and is still valid."""
    disabled = NvmlState(enabled=False, samples=(), query_failures=MappingProxyType({}))
    for collector in (GpuMetricsCollector(lambda: disabled), GpuMetricsCollector()):
        text = exposition(collector)
        assert_promtool_clean(text)
        assert "gpu=" not in text


def test_unsupported_readings_are_left_out_not_zero() -> None:
    """Readings a GPU does not support are left out of the exposition, not exported as 0."""
    bare = GpuSample(at=0.0, uuid=H200, index=0, name="NVIDIA H200", utilization_ratio=0.5)
    state = NvmlState(enabled=True, samples=(bare,), query_failures=MappingProxyType({}))
    text = exposition(GpuMetricsCollector(lambda: state))
    assert_promtool_clean(text)
    assert "tritonwatch_gpu_fan_speed_ratio{" not in text
    assert "tritonwatch_gpu_clock_event_reasons{" not in text
    labels = [("gpu", H200), ("gpu_index", "0"), ("source", "nvml")]
    assert sample_value(text, "tritonwatch_gpu_utilization_ratio", labels) == 0.5
