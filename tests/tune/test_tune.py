"""The tuning loop against the simulator in explicit model-control mode."""

from __future__ import annotations

import json
import signal
import subprocess
from typing import Any

import pytest

from sim_process import SimProcess
from support import TRITONWATCH, wait_until
from tritonwatch.sweep_records import SweepResult, SweepSettings
from tritonwatch.tune.candidates import Change
from tritonwatch.tune.repository import ModelRepository, NotExplicitModeError, changed, to_pbtxt
from tritonwatch.tune.tuner import Tuner

pytestmark = pytest.mark.e2e


def _settings(
    url: str,
    model: str,
    budget: float,
    levels: tuple[float, ...] = (1, 2, 4, 8),
    window: float = 0.3,
) -> SweepSettings:
    return SweepSettings(url=url, model=model, levels=levels, budget_p95=budget,
                         window_seconds=window, max_windows=4)  # fmt: skip


def test_queue_delay_too_high_is_lowered_until_p95_fits() -> None:
    """Too high a queue delay is lowered, on the server too, until p95 fits the budget."""
    with SimProcess(scenario="queue-delay-too-high") as sim:
        # 80 ms per request at concurrency 1: windows long enough for 20+ samples per side
        settings = _settings(sim.http_url, "resnet50", 0.05, (1, 2), window=0.8)
        result = Tuner(settings, apply=True, max_steps=3).run()
        on_server = ModelRepository(sim.http_url, "resnet50").config()
    before = result.original["dynamic_batching"]["max_queue_delay_microseconds"]
    after = result.final["dynamic_batching"]["max_queue_delay_microseconds"]
    assert before == 80000
    assert after <= 40000
    assert on_server["dynamic_batching"]["max_queue_delay_microseconds"] == after
    assert result.history[0].throughput is None  # nothing fit the budget before
    kept = [s for s in result.history if s.verdict == "keep"]
    assert kept
    assert all(
        s.change is not None and s.change.parameter.endswith("max_queue_delay_microseconds")
        for s in kept
    )
    assert result.history[-1].p95 is not None
    assert result.history[-1].p95 <= 0.05
    assert set(changed(result.original, result.final)) == {"dynamic_batching"}
    assert to_pbtxt(result.final, ["dynamic_batching"]).startswith("dynamic_batching {")


def test_gpu_underused_gets_instances_until_the_gpu_saturates_then_stops() -> None:
    """30 % of the GPU per execution: 3-4 instances fill it; a fifth would buy nothing."""
    with SimProcess(scenario="gpu-underused") as sim:
        result = Tuner(_settings(sim.http_url, "simple", 0.5), apply=True, max_steps=6).run()
    counts = [s.change.proposed for s in result.history if s.change and s.verdict == "keep"]
    assert counts[:2] == [2, 3]
    final = result.final["instance_group"][0]["count"]
    assert 3 <= final <= 5
    assert len(result.history) - 1 < 6  # it stopped by itself, not at --max-steps
    throughputs = [s.throughput for s in result.history if s.verdict in ("baseline", "keep")]
    assert throughputs[-1] is not None
    assert throughputs[0] is not None
    assert throughputs[-1] > 2.5 * throughputs[0]


def test_a_change_that_makes_things_worse_is_rolled_back() -> None:
    """A change that does not help (a 30 ms delay on a 1 ms model) is undone on the server."""

    def worse(config: dict[str, Any], sweep: SweepResult, budget: float) -> list[Change]:
        """Offers one change known to hurt: a 30 ms queue delay on a 1 ms model."""
        delay = config["dynamic_batching"]["max_queue_delay_microseconds"]
        return [
            Change("dynamic_batching.max_queue_delay_microseconds", delay, 30000, "test: worse")
        ]

    with SimProcess() as sim:
        repository = ModelRepository(sim.http_url, "simple")
        original = repository.config()
        result = Tuner(_settings(sim.http_url, "simple", 0.05, (1, 2)), apply=True, max_steps=1,
                       propose=worse).run()  # fmt: skip
        assert repository.config() == original
        repository.close()
    assert result.history[1].verdict in ("revert", "inconclusive")
    assert result.final == original


def test_without_apply_it_only_plans() -> None:
    """Without --apply the tuner plans one change and leaves the server's config alone."""
    with SimProcess(scenario="gpu-underused") as sim:
        repository = ModelRepository(sim.http_url, "simple")
        original = repository.config()
        result = Tuner(_settings(sim.http_url, "simple", 0.5), apply=False, max_steps=3).run()
        assert repository.config() == original
        repository.close()
    assert result.plan is not None
    assert (result.plan.parameter, result.plan.current, result.plan.proposed) == (
        "instance_group[0].count",
        1,
        2,
    )
    assert len(result.history) == 1


def test_a_server_not_in_explicit_mode_is_refused_untouched() -> None:
    """A server not in explicit model-control mode is refused, untouched, with exit 2."""
    with SimProcess(model_control_mode="none") as sim:
        tuner = Tuner(_settings(sim.http_url, "simple", 0.05, (1,)), apply=True, max_steps=2)
        with pytest.raises(NotExplicitModeError, match="--model-control-mode=explicit"):
            tuner.run()
        ran = subprocess.run([TRITONWATCH, "tune", "--url", sim.http_url, "--model", "simple",
                              "--budget-p95", "50ms", "--apply", "--concurrency", "1",
                              "--measurement-interval", "300ms"],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert ran.returncode == 2
    assert "--model-control-mode=explicit" in ran.stdout


def test_ctrl_c_mid_step_restores_the_last_kept_config() -> None:
    """Ctrl-C mid-step restores the last kept config and exits 130."""
    with SimProcess(scenario="gpu-underused") as sim:
        repository = ModelRepository(sim.http_url, "simple")
        original = repository.config()
        process = subprocess.Popen(
            [TRITONWATCH, "tune", "--url", sim.http_url, "--model", "simple", "--budget-p95",
             "500ms", "--apply", "--concurrency", "1,4", "--measurement-interval", "300ms"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("step 1:"):
                break
        wait_until(
            lambda: repository.config()["instance_group"][0]["count"] == 2, 10, "step 1 in force"
        )
        process.send_signal(signal.SIGINT)
        rest = process.stdout.read()
        code = process.wait(timeout=30)
        process.stdout.close()
        restored = repository.config()
        repository.close()
    assert code == 130, rest
    assert "restored the last kept config" in rest
    assert restored == original


def test_json_output(tmp_path: Any) -> None:
    """tune --json writes the plan, an empty diff and the baseline, and prints the plan."""
    out = tmp_path / "tune.json"
    with SimProcess(scenario="queue-delay-too-high") as sim:
        ran = subprocess.run([TRITONWATCH, "tune", "--url", sim.http_url, "--model", "resnet50",
                              "--budget-p95", "50ms", "--concurrency", "1,2",
                              "--measurement-interval", "300ms", "--json", str(out)],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    text = " ".join(ran.stdout.split())  # rich wraps long lines at the terminal width
    assert (
        "plan (nothing changed; add --apply): dynamic_batching.max_queue_delay_microseconds 80000 → 40000"
        in text
    )
    data = json.loads(out.read_text())
    assert data["plan"]["proposed"] == 40000
    assert data["diff"] == {}
    assert data["history"][0]["verdict"] == "baseline"
