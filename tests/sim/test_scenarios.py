"""Each scenario produces the condition it names, in numbers a collector can see.

Loads are canary-like (a few dozen requests per second, or a short concurrency burst),
driven in process on virtual time, so the figures are the scenario's own on any host
(noise comes from the seeded draws only); the evidence is read from ``/metrics``, the statistics API, and the
simulator's ground truth (true server-side latencies).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Callable

import numpy as np
import pytest
import tritonclient.http as httpclient

from tritonwatch.sim.core import SimCore
from tritonwatch.sim.load import LoadResult, closed_loop, open_loop, over_one_interval
from tritonwatch.sim.scenarios import SCENARIOS
from tritonwatch.sim.server import Simulator
from tritonwatch.sim.stats import percentile
from tritonwatch.sim.testing import Scrape, fetch, scrape, simple_inputs

pytestmark = pytest.mark.sim

NEVER_S = 3600.0
GPU0 = "GPU-51a7c0de-0000-4000-8000-000000000000"
BUDGET_S = 0.050


def share(before: Scrape, after: Scrape, stage: str, model: str = "simple") -> float:
    """Fraction of server request time spent in ``stage`` between two scrapes."""
    part = after.model(f"nv_inference_{stage}_duration_us", model) - before.model(
        f"nv_inference_{stage}_duration_us", model
    )
    whole = after.model("nv_inference_request_duration_us", model) - before.model(
        "nv_inference_request_duration_us", model
    )
    return part / whole


def test_every_scenario_is_covered() -> None:
    """Breaks if a scenario is registered without a test here or in test_llm_scenarios.py."""
    tested = {
        "kv-cache-pressure",
        "ttft-queueing",
        "healthy",
        "queue-delay-too-high",
        "gpu-underused",
        "compute-bound",
        "network-bound",
        "memory-scarce",
        "low-throughput-small-batches",
    }
    assert set(SCENARIOS) == tested


def test_healthy_stays_inside_the_budget(start_sim: Callable[..., Simulator]) -> None:
    """A concurrency-4 burst on the built-in models: p95 far under 50 ms, no failures."""
    sim = start_sim(scenario="healthy", clock="virtual")
    result: LoadResult = sim.run_async(
        lambda core: closed_loop(core, "simple", concurrency=4, duration_s=0.3)
    )
    assert result.failed == 0
    assert percentile(sim.latency_samples("simple"), 0.95) < BUDGET_S / 5


def test_queue_delay_too_high_is_queue_dominated(start_sim: Callable[..., Simulator]) -> None:
    """20 req/s: p95 over 50 ms, and the queue is most of the server's time."""
    sim = start_sim(scenario="queue-delay-too-high", clock="virtual")
    before = scrape(sim)
    sim.run_async(lambda core: open_loop(core, "simple", rate_per_s=20, duration_s=0.4))
    after = scrape(sim)
    # Alone in the queue, each request waits out the 80 ms delay, then ~1 ms of work.
    assert 0.080 < percentile(sim.latency_samples("simple"), 0.95) < 0.085
    assert share(before, after, "queue") > 0.95


def test_gpu_underused_queues_while_the_gpu_idles(start_sim: Callable[..., Simulator]) -> None:
    """A concurrency-8 burst: requests pending and queueing, GPU utilisation under 0.4."""
    sim = start_sim(scenario="gpu-underused", metrics_interval_s=NEVER_S, clock="virtual")

    async def burst(core: SimCore) -> int:
        load = asyncio.ensure_future(closed_loop(core, "simple", concurrency=8, duration_s=0.5))
        await asyncio.sleep(0.25)
        pending_midway = core.repository.pending("simple")
        await load
        return pending_midway

    before = scrape(sim)
    pending_midway = sim.run_async(lambda core: over_one_interval(core, burst(core)))
    after = scrape(sim)
    assert pending_midway == 7  # one instance: the other seven of eight wait
    assert share(before, after, "queue") > 0.8
    # One instance busy all the time at 30 % occupancy: the GPU idles 70 % of it.
    assert after.value("nv_gpu_utilization", gpu_uuid=GPU0) == pytest.approx(0.3, abs=0.01)


def test_compute_bound_is_compute_dominated_on_a_busy_gpu(
    start_sim: Callable[..., Simulator],
) -> None:
    """Light load: compute_infer is nearly all of server time, GPU busy, p95 over budget."""
    sim = start_sim(scenario="compute-bound", metrics_interval_s=NEVER_S, clock="virtual")
    before = scrape(sim)
    sim.run_async(
        lambda core: over_one_interval(
            core, closed_loop(core, "simple", concurrency=2, duration_s=0.4)
        )
    )
    after = scrape(sim)
    assert share(before, after, "compute_infer") > 0.99
    assert after.value("nv_gpu_utilization", gpu_uuid=GPU0) >= 0.99
    assert percentile(sim.latency_samples("simple"), 0.95) > BUDGET_S


def test_network_bound_delay_is_seen_only_by_the_client(sim: Simulator) -> None:
    """The client waits 40 ms more than the server's own request duration says.

    Real sockets and real time: the client's wait can only be longer than the 40 ms
    slept, and the server's ~1 ms is bounded at 10 ms (over 5x)."""
    sim.set_scenario("network-bound")
    client = httpclient.InferenceServerClient(sim.http_url.removeprefix("http://"))
    rows = np.ones((1, 16), dtype=np.int32)
    client_s = []
    for _ in range(4):
        started = time.perf_counter()
        client.infer("simple", simple_inputs(httpclient, rows, rows))
        client_s.append(time.perf_counter() - started)
    client.close()
    parsed = scrape(sim)
    server_s = parsed.model("nv_inference_request_duration_us", "simple") / 4 / 1e6
    assert min(client_s) >= 0.040
    assert server_s < 0.010


def test_memory_scarce_fills_gpu_memory(start_sim: Callable[..., Simulator]) -> None:
    """GPU memory used is over 90 % of total; one instance fewer frees a proportional share."""
    sim = start_sim(scenario="memory-scarce")
    parsed = scrape(sim)
    used = parsed.value("nv_gpu_memory_used_bytes", gpu_uuid=GPU0)
    total = parsed.value("nv_gpu_memory_total_bytes", gpu_uuid=GPU0)
    assert used / total == pytest.approx(0.93, abs=0.01)
    client = httpclient.InferenceServerClient(sim.http_url.removeprefix("http://"))
    config = client.get_model_config("simple")
    assert config["instance_group"][0]["count"] == 2
    config["instance_group"][0]["count"] = 1
    client.load_model("simple", config=json.dumps(config))
    client.close()
    assert scrape(sim).value("nv_gpu_memory_used_bytes", gpu_uuid=GPU0) / total < 0.5


def test_low_throughput_small_batches_never_batches(start_sim: Callable[..., Simulator]) -> None:
    """Concurrency 8: every execution is a batch of one, while p95 has headroom."""
    sim = start_sim(scenario="low-throughput-small-batches", clock="virtual")
    before = scrape(sim)
    sim.run_async(lambda core: closed_loop(core, "simple", concurrency=8, duration_s=0.3))
    after = scrape(sim)
    count = after.model("nv_inference_count", "simple") - before.model(
        "nv_inference_count", "simple"
    )
    executions = after.model("nv_inference_exec_count", "simple") - before.model(
        "nv_inference_exec_count", "simple"
    )
    assert count > 100
    assert count / executions == 1.0
    assert percentile(sim.latency_samples("simple"), 0.95) < BUDGET_S


def test_admin_endpoint_switches_one_model_at_run_time(sim: Simulator) -> None:
    """POST /sim/scenario with a model changes that model only; config and state show it."""
    request = urllib.request.Request(
        sim.http_url + "/sim/scenario",
        data=json.dumps({"name": "queue-delay-too-high", "model": "resnet50"}).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert json.loads(response.read()) == {
            "scenario": "queue-delay-too-high",
            "model": "resnet50",
        }
    state = json.loads(fetch(sim.http_url + "/sim/state"))
    scenarios = {model["name"]: model["scenario"] for model in state["models"]}
    assert scenarios == {
        "simple": "healthy",
        "resnet50": "queue-delay-too-high",
        "text_identity": "healthy",
    }
    resnet = json.loads(fetch(sim.http_url + "/v2/models/resnet50/config"))
    simple = json.loads(fetch(sim.http_url + "/v2/models/simple/config"))
    assert resnet["dynamic_batching"]["max_queue_delay_microseconds"] == 80_000
    assert simple["dynamic_batching"]["max_queue_delay_microseconds"] == 100
