"""Behaviour a tuning loop relies on: delay → fuller batches, instances → saturation, restart.

Load is driven in process (``tritonwatch.sim.load``) on virtual time, so every figure is
the simulated model's own, exact on any host; configuration changes go through the real
HTTP client as a tuning loop would send them, and every figure is read back from
``/metrics``.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pytest
import tritonclient.http as httpclient

from tritonwatch.sim.load import closed_loop, open_loop, over_one_interval
from tritonwatch.sim.server import Simulator
from tritonwatch.sim.testing import (
    DETERMINISTIC_TIMING,
    Scrape,
    model_set_with,
    scrape,
    simple_inputs,
)

pytestmark = pytest.mark.sim

NEVER_S = 3600.0  # metrics interval: only explicit polls close an interval


def load_config(client: httpclient.InferenceServerClient, model: str, **changes: int) -> None:
    """GETs the config, changes the delay and/or instance count, loads it back (as a tuner)."""
    config = client.get_model_config(model)
    if "delay_us" in changes:
        config["dynamic_batching"]["max_queue_delay_microseconds"] = changes["delay_us"]
    if "instances" in changes:
        config["instance_group"][0]["count"] = changes["instances"]
    client.load_model(model, config=json.dumps(config))


def delta(before: Scrape, after: Scrape, name: str, model: str = "simple") -> float:
    return after.model(name, model) - before.model(name, model)


def test_longer_queue_delay_makes_fuller_batches_and_longer_queues(
    start_sim: Callable[..., Simulator],
) -> None:
    """Same steady load; max_queue_delay 0 → 4 ms raises Δcount/Δexec_count and queue time."""
    sim = start_sim(
        models=model_set_with(simple={"timing": DETERMINISTIC_TIMING}),
        metrics_interval_s=NEVER_S,
        clock="virtual",
    )
    client = httpclient.InferenceServerClient(sim.http_url.removeprefix("http://"))
    measured = {}
    for delay_us in (0, 4000):
        load_config(client, "simple", delay_us=delay_us)
        before = scrape(sim)
        sim.run_async(lambda core: open_loop(core, "simple", rate_per_s=400, duration_s=0.5))
        after = scrape(sim)
        batch = delta(before, after, "nv_inference_count") / delta(
            before, after, "nv_inference_exec_count"
        )
        queue_us = delta(before, after, "nv_inference_queue_duration_us") / delta(
            before, after, "nv_inference_request_success"
        )
        measured[delay_us] = (batch, queue_us)
    client.close()
    # Arrivals 2.5 ms apart, 1.05 ms executions: with no delay each runs alone and never
    # queues; with 4 ms the first of each pair waits it out and the second 1.5 ms.
    assert measured[0] == (1.0, 0.0)
    batch_long, queue_long = measured[4000]
    assert batch_long == 2.0
    assert queue_long == pytest.approx((4000 + 1500) / 2, abs=1.0)  # whole µs per request


def test_instances_raise_throughput_until_the_gpu_saturates(
    start_sim: Callable[..., Simulator],
) -> None:
    """4 ms executions at 30 % occupancy: throughput ∝ instances up to ~3.3, then flat."""
    timing = {**DETERMINISTIC_TIMING, "compute_infer": "4ms", "compute_infer_per_item": 0}
    sim = start_sim(
        models=model_set_with(
            simple={
                "timing": timing,
                "dynamic_batching": None,
                "gpu_occupancy": {"base": 0.3, "per_item": 0},
            }
        ),
        metrics_interval_s=NEVER_S,
        clock="virtual",
    )
    client = httpclient.InferenceServerClient(sim.http_url.removeprefix("http://"))
    gpu = "GPU-51a7c0de-0000-4000-8000-000000000000"
    throughput, utilisation = {}, {}

    for instances in (1, 2, 3, 4, 6):
        load_config(client, "simple", instances=instances)
        before = scrape(sim)
        result = sim.run_async(
            lambda core: over_one_interval(
                core, closed_loop(core, "simple", concurrency=12, duration_s=0.6)
            )
        )
        after = scrape(sim)
        throughput[instances] = delta(before, after, "nv_inference_count") / result.elapsed_s
        utilisation[instances] = after.value("nv_gpu_utilization", gpu_uuid=gpu)
    client.close()
    # 4 ms executions: 250/s per instance until Σ occupancy (0.3 each) passes 1, then the
    # GPU's 1 / (4 ms × 0.3) = 833/s; utilisation 0.3 per instance, then saturated.
    assert {n: round(rate, 3) for n, rate in throughput.items()} == {
        1: 250.0,
        2: 500.0,
        3: 750.0,
        4: 833.333,
        6: 833.333,
    }
    assert {n: round(busy, 6) for n, busy in utilisation.items()} == {
        1: 0.3,
        2: 0.6,
        3: 0.9,
        4: 1.0,
        6: 1.0,
    }


def test_restart_resets_every_counter(
    sim: Simulator, http: httpclient.InferenceServerClient
) -> None:
    """After a restart counters, energy and statistics start again from zero."""
    rows = np.ones((1, 16), dtype=np.int32)
    for _ in range(3):
        http.infer("simple", simple_inputs(httpclient, rows, rows))
    sim.poll_metrics()
    before = scrape(sim)
    gpu = "GPU-51a7c0de-0000-4000-8000-000000000000"
    assert before.model("nv_inference_request_success", "simple") == 3
    assert before.value("nv_energy_consumption", gpu_uuid=gpu) > 0
    sim.restart()
    after = scrape(sim)
    for name in (
        "nv_inference_request_success",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us",
    ):
        assert after.model(name, "simple") == 0, name
    assert after.value("nv_energy_consumption", gpu_uuid=gpu) == 0
    stats = http.get_inference_statistics("simple")["model_stats"][0]
    assert stats["inference_stats"]["success"]["count"] == 0
    assert stats["execution_count"] == 0
    http.infer("simple", simple_inputs(httpclient, rows, rows))
    assert scrape(sim).model("nv_inference_request_success", "simple") == 1
