"""Scenario × rule matrix: the daemon's advisor on the simulator's scenarios.

Each round runs the real daemon (canary, Triton scrapes, evaluation) against the
simulator with one scenario per model, and waits for each model's recommendation.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim_process import SimProcess
from support import wait_until
from tritonwatch.config import load_config
from tritonwatch.daemon import Daemon
from tritonwatch.probe.load.pool import ProcessWorker, Worker, stop_workers
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


def _actions(daemon: Daemon) -> dict[str, set[str]]:
    return {
        model: {str(r.action) for r in recs}
        for (_, model), recs in daemon.findings.recommendations.by_model().items()
    }


def _round(tmp_path: Path, scenarios: dict[str, str], expected: dict[str, str | None],
           fault: dict[str, object] | None = None, burst_model: str | None = None) -> dict[str, set[str]]:  # fmt: skip
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
            wanted = {m: a for m, a in expected.items() if a is not None}
            try:
                wait_until(lambda: all(a in _actions(daemon).get(m, set()) for m, a in wanted.items()),
                           45, f"recommendations {wanted}")  # fmt: skip
            except AssertionError as error:
                raise AssertionError(f"{error}; the advisor said {_actions(daemon)}") from None
            return _actions(daemon)
        finally:
            daemon.stop()
            stop_workers(workers)


def test_queue_delay_gpu_underuse_and_healthy(tmp_path: Path) -> None:
    actions = _round(
        tmp_path,
        {"simple": "queue-delay-too-high", "resnet50": "gpu-underused", "text_identity": "healthy"},
        {"simple": "lower_queue_delay", "resnet50": "add_instance", "text_identity": None},
    )
    assert not actions.get("text_identity")  # healthy: no rule fires


def test_compute_network_and_memory(tmp_path: Path) -> None:
    _round(
        tmp_path,
        {"simple": "compute-bound", "resnet50": "network-bound", "text_identity": "memory-scarce"},
        {
            "simple": "optimize_model",
            "resnet50": "reduce_network_overhead",
            "text_identity": "remove_instance",
        },
    )


def test_small_batches_and_rejected_requests(tmp_path: Path) -> None:
    actions = _round(
        tmp_path,
        {
            "simple": "low-throughput-small-batches",
            "resnet50": "healthy",
            "text_identity": "healthy",
        },
        {
            "simple": "enable_dynamic_batching",
            "text_identity": "tune_queue_policy",
            "resnet50": None,
        },
        fault={
            "kind": "error_burst",
            "reason": "REJECTED",
            "fraction": 0.3,
            "model": "text_identity",
        },
        burst_model="simple",
    )
    assert not actions.get("resnet50")
