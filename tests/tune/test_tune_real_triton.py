"""``tritonwatch tune --apply`` against a real tritonserver in explicit model-control mode.

``slow_queue`` (tests/triton_models) runs 1 ms of work behind a 30 ms batching delay that
light load never fills, so a 10 ms p95 budget is out of reach until the delay comes down.
The tuner has to measure that on the real server, lower the delay through the real
repository API, and leave the server with exactly the config it reports.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kinds import SECOND_REAL_TRITON
from real_triton import RealTriton
from support import TRITONWATCH

pytestmark = [pytest.mark.real, pytest.mark.xdist_group(SECOND_REAL_TRITON)]
"""On the second shared server's worker (tests/kinds.py): the longest real-Triton
modules run beside the first server's, not after them."""

BUDGET_SECONDS = 0.015


def _without_delay(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` less the one field the tuner may change here."""
    rest = copy.deepcopy(config)
    del rest["dynamic_batching"]["max_queue_delay_microseconds"]
    return rest


def test_tune_apply_lowers_the_queue_delay_into_the_budget(
    real_triton: RealTriton, tmp_path: Path
) -> None:
    """Fails if tune misreads real Triton's queue time, cannot load a config into it,
    stops outside the budget, or leaves the server with another config than it reports.
    On the shared server: ``slow_queue`` is loaded from its files again afterwards."""
    try:
        _tune_and_check(real_triton, tmp_path)
    finally:
        real_triton.reset("slow_queue")


def _tune_and_check(server: RealTriton, tmp_path: Path) -> None:
    original = server.config("slow_queue")
    assert original["dynamic_batching"]["max_queue_delay_microseconds"] == 30000
    out = tmp_path / "tune.json"
    ran = subprocess.run(
        [TRITONWATCH, "tune", "--url", server.http_url, "--metrics-url", server.metrics_url,
         "--model", "slow_queue", "--budget-p95", "15ms", "--apply",
         # one closed-loop client: the queue is the batching timer's, not a crowd's
         "--concurrency", "1", "--measurement-interval", "500ms", "--max-windows", "6",
         "--max-steps", "3", "--json", str(out)],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    report = json.loads(out.read_text())
    history = report["history"]
    steps = "\n".join(str(step) for step in history)

    assert report["original_config"] == original
    assert report["interrupted"] is False
    assert history[0]["verdict"] == "baseline"
    assert history[0]["throughput_in_budget"] is None, steps  # 30 ms of queue: nothing fits
    assert history[0]["p95_seconds"] > BUDGET_SECONDS

    # Every change it kept lowered the delay, and the last one it kept fits the budget.
    kept = [step for step in history if step["verdict"] == "keep"]
    assert kept, steps
    for step in kept:
        assert step["parameter"] == "dynamic_batching.max_queue_delay_microseconds", steps
        assert step["proposed"] < step["current"], steps
    assert kept[-1]["throughput_in_budget"] is not None, steps
    assert kept[-1]["p95_seconds"] <= BUDGET_SECONDS, steps

    final = report["final_config"]
    assert final["dynamic_batching"]["max_queue_delay_microseconds"] == kept[-1]["proposed"]
    assert _without_delay(final) == _without_delay(original)
    assert set(report["diff"]) == {"dynamic_batching"}

    # The server runs what tune says it left.
    assert server.config("slow_queue") == final


INSTANCE_BUDGET_SECONDS = 0.050


def test_tune_apply_adds_the_cpu_instance_and_p95_falls_into_the_budget(
    real_triton: RealTriton, tmp_path: Path
) -> None:
    """Breaks if tune, on real Triton, does not add the second KIND_CPU instance to the
    queued, unbatchable ``waiting_cpu`` (20 ms a request, one instance), does not keep
    it, or leaves p95 at three concurrent clients over the budget. On the shared server:
    ``waiting_cpu`` is loaded from its files again afterwards."""
    try:
        _tune_instances_and_check(real_triton, tmp_path)
    finally:
        real_triton.reset("waiting_cpu")


def _tune_instances_and_check(server: RealTriton, tmp_path: Path) -> None:
    original = server.config("waiting_cpu")
    assert original["instance_group"][0]["count"] == 1
    out = tmp_path / "tune.json"
    ran = subprocess.run(
        [TRITONWATCH, "tune", "--url", server.http_url, "--metrics-url", server.metrics_url,
         "--model", "waiting_cpu", "--budget-p95", "50ms", "--apply", "--concurrency", "1,2,3",
         "--measurement-interval", "500ms", "--max-windows", "6", "--max-steps", "1",
         "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    report = json.loads(out.read_text())
    history = report["history"]
    steps = "\n".join(str(step) for step in history)
    assert history[0]["verdict"] == "baseline"
    (step,) = history[1:]
    assert (step["parameter"], step["current"], step["proposed"]) == (
        "instance_group[0].count", 1, 2,
    ), steps  # fmt: skip
    assert step["verdict"] == "keep", steps
    assert step["p95_seconds"] <= INSTANCE_BUDGET_SECONDS, steps
    final = report["final_config"]
    assert final["instance_group"][0]["count"] == 2
    assert final["instance_group"][0]["kind"] == "KIND_CPU"
    assert server.config("waiting_cpu")["instance_group"][0]["count"] == 2
