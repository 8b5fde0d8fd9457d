"""The tuning loop and ``tritonwatch tune`` against a spawned simulator, on real sockets.

The tuner's decisions on exact inputs are in ``test_tune_in_process.py``; here are the
command line and one smoke test of the real sweep, with bounds far from the nominal."""

from __future__ import annotations

import json
import signal
import subprocess
from typing import Any

import pytest

from sim_process import SimProcess
from support import TRITONWATCH, wait_until
from sweep_support import tune_settings
from tritonwatch.commands.tune.repository import ModelRepository
from tritonwatch.commands.tune.tuner import Tuner

pytestmark = pytest.mark.real


def test_a_real_sweep_adds_an_instance_to_an_underused_gpu() -> None:
    """Smoke test through real sockets on real time: breaks if the tuner's own sweep of a
    server whose one instance holds back an idle GPU does not add and keep a second
    (throughput doubles, far beyond window noise; exact steps: test_tune_in_process.py)."""
    with SimProcess(scenario="gpu-underused") as sim:
        settings = tune_settings(sim.http_url, "simple", 0.5, (1, 4), window=0.5)
        result = Tuner(settings, apply=True, max_steps=1).run()
        on_server = ModelRepository(sim.http_url, "simple").config()
    assert [str(s.verdict) for s in result.history] == ["baseline", "keep"]
    step = result.history[1]
    assert step.change is not None
    assert (step.change.parameter, step.change.proposed) == ("instance_group[0].count", 2)
    assert result.final["instance_group"][0]["count"] == 2
    assert on_server["instance_group"][0]["count"] == 2


def test_the_command_refuses_a_server_not_in_explicit_mode() -> None:
    """Breaks if ``tritonwatch tune --apply`` against a server not in explicit
    model-control mode does not exit 2 naming the flag it needs."""
    with SimProcess(model_control_mode="none") as sim:
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
