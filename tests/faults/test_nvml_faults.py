"""NVML failing per call (``GpuIsLost``, ``NotSupported``, ``Unknown``), a GPU falling
off the bus, and NVML vanishing: the rest of the GPU collector keeps working.

The collector and the exporter family code are the real ones; NVML is
:class:`~tritonwatch.scrape.nvml_fake.FakeNvml` replaying the H200 recording as two
GPUs, so that one GPU or one query can fail while the others answer. The last test runs
the whole daemon in this process with that fake NVML and a simulator target.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from structlog.testing import capture_logs

from support import assert_promtool_clean, fixtures_dir, http_get, sample_value, wait_until
from tritonwatch.config import load_config
from tritonwatch.export.gpu_metrics import GpuMetricsCollector
from tritonwatch.records.observations import TritonGpuRates
from tritonwatch.runtime.daemon import Daemon
from tritonwatch.scrape.nvml_fake import FakeNvml
from tritonwatch.scrape.nvml_sampler import NvmlSampler
from tritonwatch.sim.server import Simulator

pytestmark = pytest.mark.real

GPU0 = "GPU-7c754c05-34be-83d3-deff-8175702c18c4"
GPU1 = "GPU-7c754c05-34be-83d3-deff-8175702c1801"
REMOTE = "GPU-8331ed5e-e44e-72c7-fba5-ed5d48487989"  # a GPU only a Triton server reports
QUERIES_PER_SAMPLE = 12  # what _read asks of a GPU; fan speed is NotSupported on the H200


def _fake(**options: object) -> FakeNvml:
    return FakeNvml.from_file(fixtures_dir() / "nvml" / "h200_probe.json", gpus=2, **options)


def _remote() -> dict[str, TritonGpuRates]:
    rates = TritonGpuRates(
        gpu_uuid=REMOTE,
        interval_seconds=15.0,
        utilization_ratio=0.4,
        memory_used_bytes=4930404352,
        memory_total_bytes=15842934784,
        power_watts=27.444,
        power_limit_watts=70.0,
        energy_joules=21386.444,
        energy_watts=26.17,
    )
    return {REMOTE: rates}


class Exposition:
    """The GPU families of one collector as the exporter renders them."""

    def __init__(self, collector: NvmlSampler) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(GpuMetricsCollector(nvml=collector.state, triton=_remote))

    def text(self) -> str:
        text = generate_latest(self.registry).decode()
        assert_promtool_clean(text)
        return text


def _value(text: str, name: str, gpu: str, **labels: str) -> float | None:
    return sample_value(text, name, [("gpu", gpu), *labels.items()])


def _failures(text: str, gpu: str, query: str, error: str) -> float | None:
    return _value(text, "tritonwatch_nvml_query_failures_total", gpu, query=query, error=error)


def _complete(text: str, gpu: str) -> bool:
    """Every reading the H200 recording has, present for ``gpu``."""
    families = (
        "tritonwatch_gpu_power_watts",
        "tritonwatch_gpu_power_limit_watts",
        "tritonwatch_gpu_energy_joules_total",
        "tritonwatch_gpu_memory_used_bytes",
        "tritonwatch_gpu_memory_total_bytes",
        "tritonwatch_gpu_sm_clock_hertz",
        "tritonwatch_gpu_temperature_celsius",
    )
    return all(_value(text, name, gpu) is not None for name in families) and (
        _value(text, "tritonwatch_gpu_utilization_ratio", gpu, source="nvml") is not None
    )


def _remote_still_there(text: str) -> bool:
    return _value(
        text, "tritonwatch_gpu_utilization_ratio", REMOTE, source="triton"
    ) == 0.4 and _value(text, "tritonwatch_gpu_power_watts", REMOTE) == pytest.approx(27.444)


def _canary_successes(text: str) -> float:
    labels = [("model", "simple"), ("outcome", "success")]
    return sample_value(text, "tritonwatch_canary_requests_total", labels) or 0.0


@pytest.fixture
def fake() -> FakeNvml:
    return _fake()


@pytest.fixture
def collector(fake: FakeNvml) -> Iterator[NvmlSampler]:
    collector = NvmlSampler(fake, clock=fake.now)
    assert collector.start()
    yield collector
    collector.close()


@pytest.mark.parametrize(
    "error", [pynvml.NVMLError_GpuIsLost, pynvml.NVMLError_Unknown, pynvml.NVMLError_NotSupported]
)
def test_one_query_failing_on_one_gpu_loses_only_that_reading(
    fake: FakeNvml, collector: NvmlSampler, error: type[pynvml.NVMLError]
) -> None:
    """Power on GPU 1 raises on three calls in a row, then answers again."""
    exposition = Exposition(collector)
    fake.inject("nvmlDeviceGetPowerUsage", error, times=3, gpu=1)
    with capture_logs() as logs:
        for _ in range(3):
            fake.step()
            collector.sample()
    text = exposition.text()
    assert _complete(text, GPU0)
    assert _value(text, "tritonwatch_gpu_power_watts", GPU1) is None
    assert _value(text, "tritonwatch_gpu_temperature_celsius", GPU1) is not None
    assert _value(text, "tritonwatch_gpu_energy_joules_total", GPU1) is not None
    assert _remote_still_there(text)
    name = error.__name__
    if error is pynvml.NVMLError_NotSupported:  # remembered, not asked again, not a failure
        assert _failures(text, GPU1, "power", name) is None
        assert fake.calls.count("nvmlDeviceGetPowerUsage") == 3 + 1
        assert logs == []
    else:  # counted every time, logged once
        assert _failures(text, GPU1, "power", name) == 3
        assert fake.calls.count("nvmlDeviceGetPowerUsage") == 3 + 3
        assert [(log["event"], log["gpu"], log["query"]) for log in logs] == [
            ("nvml_query_failed", GPU1, "power")
        ]
        assert logs[0]["error"] == name
    assert _failures(text, GPU0, "power", name) is None

    collector.sample()  # the fault has passed
    recovered = exposition.text()
    if error is not pynvml.NVMLError_NotSupported:
        assert _complete(recovered, GPU1)
        assert _failures(recovered, GPU1, "power", name) == 3  # a counter: kept


def test_a_gpu_falling_off_the_bus_leaves_the_others(
    fake: FakeNvml, collector: NvmlSampler
) -> None:
    """A GPU off the bus stops reading but stays listed, its failures counted and logged once."""
    exposition = Exposition(collector)
    collector.sample()
    assert _complete(exposition.text(), GPU1)
    fake.lose_gpu(1)
    with capture_logs() as logs:
        for _ in range(3):
            fake.step()
            samples = collector.sample()
    assert [s.uuid for s in samples] == [GPU0, GPU1]
    text = exposition.text()
    assert _complete(text, GPU0)
    assert _remote_still_there(text)
    for name in ("tritonwatch_gpu_power_watts", "tritonwatch_gpu_memory_used_bytes"):
        assert _value(text, name, GPU1) is None
    assert _value(text, "tritonwatch_gpu_info", GPU1) == 1  # still known, reading nothing
    for query in ("utilization", "memory", "power", "energy", "temperature"):
        assert _failures(text, GPU1, query, "NVMLError_GpuIsLost") == 3
    assert {log["gpu"] for log in logs} == {GPU1}
    assert len(logs) == len({log["query"] for log in logs})  # one line per query, once
    assert len(logs) == QUERIES_PER_SAMPLE - 1  # everything but the fan (NotSupported)

    # A fresh enumeration (a restarted daemon) finds one GPU fewer.
    with capture_logs() as logs:
        fresh = NvmlSampler(fake, clock=fake.now)
        assert fresh.start()
    assert [device[2] for device in logs[0]["devices"]] == [GPU0]
    assert [s.uuid for s in fresh.sample()] == [GPU0]


def test_nvml_vanishing_mid_run_keeps_the_rest_working_and_comes_back(fake: FakeNvml) -> None:
    """The library stops answering (every call: Uninitialized) and cannot be initialised
    (driver unloaded): every reading is lost and counted, nothing raises, the
    Triton-reported GPUs keep flowing. Initialisation is retried every interval; once the
    driver is back, the devices are found again and read, without a restart."""
    collector = NvmlSampler(fake, clock=fake.now, reinit_interval_seconds=10.0)
    assert collector.start()
    exposition = Exposition(collector)
    collector.sample()
    fake.nvmlShutdown()  # from under the collector...
    fake.library_missing = True  # ...and it cannot come back yet
    with capture_logs() as logs:
        for _ in range(2):
            samples = collector.sample()
    assert len(samples) == 2
    assert all(s.power_watts is None and s.memory_used_bytes is None for s in samples)
    text = exposition.text()
    assert _remote_still_there(text)
    for gpu in (GPU0, GPU1):
        assert _failures(text, gpu, "power", "NVMLError_Uninitialized") == 2
    events = [log["event"] for log in logs]
    assert events.count("nvml_reinit_failed") == 1  # tried at once, then not before 10 s
    assert "nvml_query_failed" in events
    assert set(events) <= {"nvml_query_failed", "nvml_reinit_failed", "nvml_cleanup_failed"}

    fake.library_missing = False  # the driver is back
    collector.sample()  # within the interval: not retried yet
    assert _value(exposition.text(), "tritonwatch_gpu_power_watts", GPU0) is None
    started = fake.now()
    while fake.now() - started < 10.0:
        fake.step()
    with capture_logs() as logs:
        samples = collector.sample()
    assert [log["event"] for log in logs if log["log_level"] != "debug"] == ["nvml_reinitialised"]
    assert [s.uuid for s in samples] == [GPU0, GPU1]
    text = exposition.text()
    assert _complete(text, GPU0) and _complete(text, GPU1)
    assert _failures(text, GPU0, "power", "NVMLError_Uninitialized") == 3  # counters kept
    collector.close()
    assert not collector.enabled


def test_a_vanished_library_shuts_down_quietly(fake: FakeNvml, collector: NvmlSampler) -> None:
    """Sampling and closing after the NVML library vanished raise nothing and disable NVML."""
    fake.nvmlShutdown()
    fake.library_missing = True
    collector.sample()
    collector.close()  # shutting down a vanished library does not raise either
    assert not collector.enabled


def test_nvml_missing_at_start_leaves_the_triton_gpus() -> None:
    """Without NVML at start the collector disables itself once; Triton's GPU series stay."""
    missing = FakeNvml.missing()
    collector = NvmlSampler(missing)
    with capture_logs() as logs:
        assert collector.start() is False
        assert collector.sample() == ()
    assert [log["event"] for log in logs] == ["nvml_disabled"]
    text = Exposition(collector).text()
    assert _remote_still_there(text)
    assert _value(text, "tritonwatch_gpu_power_watts", GPU0) is None


def test_the_daemon_keeps_serving_while_nvml_fails(tmp_path: Path) -> None:
    """The real daemon with the fake NVML: a lost GPU, then NVML gone altogether, while
    the simulator target is scraped and /metrics and /health answer."""
    fake = _fake()
    with Simulator() as sim:
        path = tmp_path / "c.yaml"
        path.write_text(
            "scrape: {interval: 500ms, timeout: 400ms}\n"
            "nvml: {enabled: true, interval: 200ms}\n"
            "canary: {rate: 5/s}\n"
            f"targets: [{{name: sim, url: '{sim.http_url}', metrics_url: '{sim.metrics_url}',"
            " models: [{name: simple}]}]\n"
        )
        daemon = Daemon(path, load_config(path), listen_override="127.0.0.1:0", nvml=fake)
        daemon.start()
        try:
            url = f"{daemon.exporter_url}/metrics"

            def metrics() -> str:
                status, text = http_get(url)
                assert status == 200
                return text

            wait_until(lambda: _complete(metrics(), GPU1), 10, "both GPUs read")
            fake.lose_gpu(1)
            fake.inject("nvmlDeviceGetTemperatureV", pynvml.NVMLError_Unknown, None, gpu=0)
            wait_until(
                lambda: (_failures(metrics(), GPU1, "power", "NVMLError_GpuIsLost") or 0) >= 3,
                10,
                "three lost readings of GPU 1 counted",
            )
            text = metrics()
            assert _value(text, "tritonwatch_gpu_power_watts", GPU0) is not None
            assert _value(text, "tritonwatch_gpu_temperature_celsius", GPU0) is None
            assert (_failures(text, GPU0, "temperature", "NVMLError_Unknown") or 0) >= 3
            assert sample_value(text, "tritonwatch_up", [("target", "sim")]) == 1

            fake.nvmlShutdown()
            fake.library_missing = True  # the driver stays away: re-initialising fails
            wait_until(
                lambda: (_failures(metrics(), GPU0, "power", "NVMLError_Uninitialized") or 0) >= 3,
                10,
                "three vanished readings counted",
            )
            successes = _canary_successes(metrics())
            wait_until(lambda: _canary_successes(metrics()) >= successes + 3, 10, "the canary")
            text = metrics()
            assert sample_value(text, "tritonwatch_scrape_success",
                                [("target", "sim"), ("source", "metrics")]) == 1  # fmt: skip
            assert http_get(f"{daemon.exporter_url}/health")[0] == 200  # the NVML job runs
        finally:
            daemon.stop()
