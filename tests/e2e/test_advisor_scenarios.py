"""Scenario × rule matrix: the daemon's advisor on the simulator's scenarios.

Each round runs the real daemon (canary, Triton scrapes, evaluation) against the
simulator with one scenario per model, and checks that the advice is exactly the
expected set of (target, model, action): nothing missing, nothing extra, nothing on
the wrong model.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from sim_process import SimProcess
from support import wait_until
from tritonwatch.config import load_config
from tritonwatch.daemon import Daemon
from tritonwatch.probe.interfaces import Worker
from tritonwatch.probe.load.pool import ProcessWorker, stop_workers
from tritonwatch.probe.load.spec import http_load_spec
from tritonwatch.probe.payload import TensorSpec, build_inputs

pytestmark = pytest.mark.e2e


def _daemon(sim: SimProcess, folder: Path) -> Daemon:
    sample = folder / "text.json"
    sample.write_text(json.dumps([["hello"]]))
    config = folder / "c.yaml"
    config.write_text(
        f"""
targets:
  - name: sim
    url: {sim.http_url}
    grpc_url: grpc://{sim.grpc_url}
    metrics_url: {sim.metrics_url}
    models:
      - {{name: simple}}
      - {{name: resnet50}}
      - {{name: text_identity, canary: {{inputs: {{INPUT0: {{file: {sample}}}}}}}}}
canary: {{rate: 20/s, distribution: poisson, timeout: 1500ms}}
scrape: {{interval: 1s, timeout: 800ms}}
alerting: {{evaluation_interval: 1s}}
advisor: {{window: 8s}}
"""
    )
    daemon = Daemon(config, load_config(config), listen_override="127.0.0.1:0")
    daemon.start()
    return daemon


Advice = tuple[str, str, str]
"""(target, model, action), as the recommendation itself names them."""

SETTLE_TIMEOUT_S = 45
"""How long the advisor may take to reach the expected advice (a loaded host is slow)."""
HOLD_S = 4.0
"""How long after that no recommendation outside the expected set may appear."""


def _advice(daemon: Daemon) -> set[Advice]:
    """Every active recommendation, by the target, model and action it names itself."""
    return {(r.target, r.model, str(r.action)) for r in daemon.findings.recommendations.active()}


def _round(
    tmp_path: Path,
    scenarios: dict[str, str],
    expected: dict[str, set[str]],
    fault: dict[str, object] | None = None,
    burst_model: str | None = None,
) -> None:
    """Runs the daemon on ``scenarios`` (model → scenario) and checks that its advice is
    exactly ``expected`` (model → actions; an empty set: no advice at all): first that it
    gets there, then that nothing else shows up while it holds."""
    assert set(expected) == set(scenarios), "every model's advice is stated"
    wanted = {("sim", model, action) for model, actions in expected.items() for action in actions}
    with SimProcess(metrics_interval_s=1.0) as sim:
        for model, scenario in scenarios.items():
            sim.set_scenario(scenario, model)
        if fault:
            sim.inject_fault(**fault)
        # The burst comes from its own process, as other clients' load does: in this
        # process it would share the in-process daemon's GIL and slow its canary down.
        workers: list[Worker] = []
        if burst_model:
            tensors = build_inputs(
                burst_model,
                [TensorSpec("INPUT0", "INT32", (1, 16)), TensorSpec("INPUT1", "INT32", (1, 16))],
                {},
            )
            spec = http_load_spec(
                sim.http_url, burst_model, "", tensors, mode="concurrency", concurrency=8
            )
            workers = [ProcessWorker(spec)]
        daemon = _daemon(sim, tmp_path)
        try:
            seen: list[set[Advice]] = [set()]

            def settled() -> bool:
                seen.append(_advice(daemon))
                return seen[-1] == wanted

            try:
                wait_until(settled, SETTLE_TIMEOUT_S, f"exactly the advice {sorted(wanted)}")
            except AssertionError as error:
                raise AssertionError(
                    f"{error}; the advisor said {sorted(seen[-1])}, missing "
                    f"{sorted(wanted - seen[-1])}, extra {sorted(seen[-1] - wanted)}"
                ) from None
            deadline = time.monotonic() + HOLD_S
            while time.monotonic() < deadline:
                extra = _advice(daemon) - wanted
                assert not extra, f"advice beyond {sorted(wanted)}: {sorted(extra)}"
                time.sleep(0.2)
        finally:
            daemon.stop()
            stop_workers(workers)


def test_queue_delay_gpu_underuse_and_healthy(tmp_path: Path) -> None:
    """Breaks if queue-delay or GPU-underuse advice is missing, extra, misplaced or on healthy."""
    _round(
        tmp_path,
        {"simple": "queue-delay-too-high", "resnet50": "gpu-underused", "text_identity": "healthy"},
        {"simple": {"lower_queue_delay"}, "resnet50": {"add_instance"}, "text_identity": set()},
    )


def test_compute_network_and_memory(tmp_path: Path) -> None:
    """Breaks if compute, network or memory advice is missing, extra or names another model."""
    _round(
        tmp_path,
        {"simple": "compute-bound", "resnet50": "network-bound", "text_identity": "memory-scarce"},
        {
            "simple": {"optimize_model"},
            "resnet50": {"reduce_network_overhead"},
            "text_identity": {"remove_instance"},
        },
    )


def test_small_batches_and_rejected_requests(tmp_path: Path) -> None:
    """Breaks if batching or queue-policy advice is missing, extra, misplaced or on healthy."""
    _round(
        tmp_path,
        {
            "simple": "low-throughput-small-batches",
            "resnet50": "healthy",
            "text_identity": "healthy",
        },
        {
            "simple": {"enable_dynamic_batching"},
            "text_identity": {"tune_queue_policy"},
            "resnet50": set(),
        },
        fault={
            "kind": "error_burst",
            "reason": "REJECTED",
            "fraction": 0.3,
            "model": "text_identity",
        },
        burst_model="simple",
    )
