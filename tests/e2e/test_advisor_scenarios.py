"""Scenario × rule matrix: the daemon's advisor on the simulator's scenarios.

Each round runs the real daemon (canary, Triton scrapes, evaluation) against the
simulator with one scenario per model, and checks that the advice is exactly the
expected set of (target, model, action): nothing missing, nothing extra, nothing on
the wrong model. The LLM round drives its models with other clients' streams (the
scenarios need concurrent sequences) and judges them on the server's own LLM numbers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sim_process import SimProcess
from stream_load import StreamLoad
from support import QUIET_HOST_CPU, SMOKE_FACTOR, wait_until
from tritonwatch.analysis.advisor_records import Recommendation
from tritonwatch.analysis.slo import Severity
from tritonwatch.config import load_config
from tritonwatch.kserve.payload import TensorSpec, build_inputs
from tritonwatch.runtime.daemon import Daemon
from tritonwatch.sim.models import ModelSet, parse_model_set
from tritonwatch.sweep.pool import ProcessWorker, stop_workers
from tritonwatch.sweep.spec import http_load_spec
from tritonwatch.sweep.worker import Worker

pytestmark = pytest.mark.sim


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
alerting: {{evaluation_interval: {EVALUATION_S:.0f}s}}
advisor: {{window: {WINDOW_S:.0f}s}}
"""
    )
    daemon = Daemon(config, load_config(config), listen_override="127.0.0.1:0")
    daemon.start()
    return daemon


Advice = tuple[str, str, str]
"""(target, model, action), as the recommendation itself names them."""

EVALUATION_S = 1.0
"""``alerting.evaluation_interval``: how often the advisor judges its window."""
WINDOW_S = 8.0
"""``advisor.window`` of the first three rounds."""


def _settle_timeout(window_s: float) -> float:
    """How long the advice may take to come: 5x what it needs at most, the advisor's
    window filled and two evaluations of it (it usually comes well before the window
    is full). A wait, not a bound on the advisor's speed: the rounds check what it
    advises."""
    return SMOKE_FACTOR * (window_s + 2 * EVALUATION_S)


HOLD_S = 4.0
"""How long after that no recommendation outside the expected set may appear."""


def _advice(daemon: Daemon) -> set[Advice]:
    """Every active recommendation, by the target, model and action it names itself."""
    return {(r.target, r.model, str(r.action)) for r in daemon.evaluator.recommendations.active()}


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
    with SimProcess(metrics_interval_s=1.0, host_cpu_utilization=QUIET_HOST_CPU) as sim:
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
            _expect_exactly(daemon, wanted, WINDOW_S)
        finally:
            daemon.stop()
            stop_workers(workers)


def _expect_exactly(
    daemon: Daemon,
    wanted: set[Advice],
    window_s: float,
    evidence: Callable[[], bool] = lambda: True,
) -> None:
    """The daemon's advice reaches ``wanted`` (with ``evidence()`` true at that moment)
    and nothing else shows up while it holds."""
    seen: list[set[Advice]] = [set()]

    def settled() -> bool:
        seen.append(_advice(daemon))
        return seen[-1] == wanted and evidence()

    try:
        wait_until(settled, _settle_timeout(window_s), f"exactly the advice {sorted(wanted)}")
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


LLM_WINDOW_S = 15.0
"""Longer than the others: the KV cache empties and refills as sequences end, and the
window's average must see several such turns."""
TTFT_BUDGET_S = 0.2
"""ttft-queueing's first tokens wait whole generations (about 0.4 s on average at 12
streams), kv-cache-pressure's wait for cache blocks: both far over 200 ms."""


def _llm_models() -> ModelSet:
    """Two TensorRT-LLM models: ``kv`` with 40 ms decode steps (the pressure needs
    sequences, not speed, and slower steps keep the token events few on a loaded host),
    ``queued`` with the default costs. TensorRT-LLM's families carry Triton's own
    model/version labels, so they land on the same record as Triton's numbers."""
    models = [
        {"name": "kv", "max_batch_size": 0, "llm": {"decode_step_base": "40ms"}},
        {"name": "queued", "max_batch_size": 0, "llm": {}},
    ]
    return parse_model_set(
        {"gpus": [{"uuid": "GPU-11111111-0000-4000-8000-000000000000"}], "models": models}
    )


def _llm_daemon(sim: SimProcess, folder: Path) -> Daemon:
    """The daemon on the LLM models with a TTFT SLO; no canary (the streams come from
    other clients), so the TTFT evidence is the server's own first-response histogram."""
    config = folder / "llm.yaml"
    config.write_text(
        f"""
targets:
  - name: sim
    url: {sim.http_url}
    grpc_url: grpc://{sim.grpc_url}
    metrics_url: {sim.metrics_url}
    models:
      - {{name: kv, canary: {{enabled: false}}}}
      - {{name: queued, canary: {{enabled: false}}}}
slo: {{ttft: {{threshold: {TTFT_BUDGET_S * 1000:.0f}ms}}}}
scrape: {{interval: 1s, timeout: 800ms}}
alerting: {{evaluation_interval: {EVALUATION_S:.0f}s}}
advisor: {{window: {LLM_WINDOW_S:.0f}s}}
"""
    )
    daemon = Daemon(config, load_config(config), listen_override="127.0.0.1:0")
    daemon.start()
    return daemon


def test_kv_cache_pressure_and_ttft_queueing(tmp_path: Path) -> None:
    """Breaks if KV-pressure or prefill advice is missing, extra, on the other model, or its
    evidence lacks KV ≥ 0.95, preempted (paused) or waiting sequences, or TTFT over budget."""
    wanted = {("sim", "kv", "reduce_kv_pressure"), ("sim", "queued", "scale_out_prefill")}
    shown: dict[str, Recommendation] = {}

    def pressure_shown(daemon: Daemon) -> bool:
        """The window is past its warm-up: every number the scenario promises is there."""
        shown.update({r.model: r for r in daemon.evaluator.recommendations.active()})
        kv = shown["kv"].evidence
        return (
            kv["kv_cache_usage_ratio"] >= 0.95
            and kv.get("paused_requests", 0.0) > 0  # TensorRT-LLM's preempted sequences
            and kv["requests_waiting"] > 0
        )

    with SimProcess(
        _llm_models(),
        metrics_interval_s=1.0,
        histogram_latencies=True,
        host_cpu_utilization=QUIET_HOST_CPU,
    ) as sim:
        sim.set_scenario("kv-cache-pressure", "kv")
        sim.set_scenario("ttft-queueing", "queued")
        full = StreamLoad(sim.http_url, "kv", concurrency=60, prompt_words=300, tokens=(64, 192))
        queue = StreamLoad(sim.http_url, "queued", concurrency=12, prompt_words=32, tokens=(24, 40))
        with full, queue:
            daemon = _llm_daemon(sim, tmp_path)
            try:
                _expect_exactly(daemon, wanted, LLM_WINDOW_S, lambda: pressure_shown(daemon))
            finally:
                daemon.stop()
    kv = shown["kv"]
    assert (kv.parameter, kv.current, kv.proposed) == ("max_batch_size / max_num_tokens", 128, 96)
    assert kv.severity == Severity.TICKET
    prefill = shown["queued"].evidence
    assert prefill["server_ttft_mean_seconds"] > TTFT_BUDGET_S
    assert prefill["ttft_budget_seconds"] == TTFT_BUDGET_S
    assert prefill["requests_waiting"] > 0
    assert prefill["requests_running"] <= 4  # the scenario's sequence limit
    assert full.failures == queue.failures == 0
    assert full.streams > 0 and queue.streams > 0
