"""scripts/gpu_check.py's verdict, on the H200 recording (it needs a real GPU to run)."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest

from support import REPO, fixtures_dir
from tritonwatch.records.observations import GpuSample
from tritonwatch.scrape.nvml_fake import FakeNvml
from tritonwatch.scrape.nvml_sampler import NvmlSampler


@pytest.fixture(scope="module")
def gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recorded_phases() -> dict[str, list[GpuSample]]:
    """The recording's idle rows, its full-load rows (the matmul ran from row 15 of
    duty_100) and its after rows, sampled as the script would."""
    fake = FakeNvml.from_file(fixtures_dir() / "nvml" / "h200_probe.json")
    collector = NvmlSampler(fake, clock=fake.now)
    collector.start()

    def rows(phase: str, first: int, count: int) -> list[GpuSample]:
        fake.seek(phase, first)
        samples = []
        for _ in range(count):
            samples.append(collector.sample()[0])
            fake.step()
        return samples

    return {
        "idle": rows("idle", 0, 16),
        "load": rows("duty_100", 15, 17),
        "after": rows("after", 0, 16),
    }


def test_the_recorded_load_passes(
    gpu_check: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    """The H200 recording's load passes gpu_check, its table showing the load's 17 rows."""
    phases = recorded_phases()
    assert gpu_check.check(phases, loaded=True) == []
    capsys.readouterr()  # drop the collector's log lines
    gpu_check.print_table(phases)
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["phase", "n", "util"]
    assert table[2].split()[:3] == ["load", "17", "0.99"]


def test_a_load_that_does_not_show_fails(gpu_check: ModuleType) -> None:
    """A load phase that looks idle fails for utilisation and power not rising."""
    phases = recorded_phases()
    phases["load"] = phases["idle"]
    problems = gpu_check.check(phases, loaded=True)
    assert any("utilisation did not rise" in p for p in problems)
    assert any("power did not rise" in p for p in problems)


def test_without_load_only_the_readings_are_checked(gpu_check: ModuleType) -> None:
    """Without a load, idle readings alone pass: nothing is asked to rise."""
    assert gpu_check.check({"idle": recorded_phases()["idle"]}, loaded=False) == []
