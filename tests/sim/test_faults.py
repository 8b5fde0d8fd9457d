"""Fault injection as clients and scrapers experience it."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import support
from tritonwatch.sim.core import SimCore
from tritonwatch.sim.load import as_request, example_inputs
from tritonwatch.sim.server import Simulator
from tritonwatch.sim.testing import (
    DETERMINISTIC_TIMING,
    fetch,
    model_set_with,
    parse_scrape,
    scrape,
    simple_inputs,
    wait_for,
)

pytestmark = pytest.mark.sim

ROWS = np.ones((1, 16), dtype=np.int32)


def infer_http(sim: Simulator, count: int = 1, **client_args: float) -> None:
    client = httpclient.InferenceServerClient(sim.http_url.removeprefix("http://"), **client_args)
    try:
        for _ in range(count):
            client.infer("simple", simple_inputs(httpclient, ROWS, ROWS))
    finally:
        client.close()


def mean_infer_ns(client: httpclient.InferenceServerClient) -> float:
    stats = client.get_inference_statistics("simple")["model_stats"][0]["inference_stats"]
    return float(stats["compute_infer"]["ns"] / stats["compute_infer"]["count"])


async def one_at_a_time(core: SimCore, count: int) -> None:
    """``count`` requests to ``simple`` in process, each sent when the last returned."""
    inputs = as_request(example_inputs(core.repository.slot("simple").spec))
    for _ in range(count):
        await core.repository.infer("simple", "", inputs)


def test_latency_spike_multiplies_compute_of_the_named_model(
    start_sim: Callable[..., Simulator],
) -> None:
    """×5 on ``simple``: its compute_infer goes from 1.05 ms to 5.25 ms per execution."""
    sim = start_sim(
        models=model_set_with(simple={"timing": DETERMINISTIC_TIMING, "dynamic_batching": None}),
        clock="virtual",
    )
    client = httpclient.InferenceServerClient(sim.http_url.removeprefix("http://"))
    sim.run_async(lambda core: one_at_a_time(core, 10))
    baseline = mean_infer_ns(client)
    sim.restart()
    sim.inject_fault(kind="latency_spike", factor=5, model="simple")
    sim.run_async(lambda core: one_at_a_time(core, 10))
    spiked = mean_infer_ns(client)
    client.close()
    # Virtual time: the nominal 1 ms + 50 µs per item, and five times it (whole ns).
    assert baseline == pytest.approx(1.05e6, abs=1)
    assert spiked == pytest.approx(5 * 1.05e6, abs=1)
    state = sim.state()
    assert [(f["kind"], f["factor"], f["model"]) for f in state["faults"]] == [
        ("latency_spike", 5.0, "simple")
    ]


def test_error_burst_fails_with_the_chosen_reason(sim: Simulator) -> None:
    """REJECTED over HTTP answers 503 and counts under reason="REJECTED"; nothing succeeds."""
    sim.inject_fault(kind="error_burst", reason="REJECTED", fraction=1.0, model="simple")
    client = httpclient.InferenceServerClient(sim.http_url.removeprefix("http://"))
    for _ in range(3):
        with pytest.raises(InferenceServerException, match="Exceeds maximum queue size") as caught:
            client.infer("simple", simple_inputs(httpclient, ROWS, ROWS))
        assert caught.value.status() == "503"
    stats = client.get_inference_statistics("simple")["model_stats"][0]["inference_stats"]
    client.close()
    parsed = scrape(sim)
    assert (
        parsed.value("nv_inference_request_failure", model="simple", reason="REJECTED", version="1")
        == 3
    )
    assert (
        parsed.value("nv_inference_request_failure", model="simple", reason="BACKEND", version="1")
        == 0
    )
    assert parsed.model("nv_inference_request_success", "simple") == 0
    assert (stats["fail"]["count"], stats["success"]["count"]) == (3, 0)


def test_backend_errors_reach_grpc_clients_as_internal(
    sim: Simulator, grpc: grpcclient.InferenceServerClient
) -> None:
    """BACKEND failures execute first, then fail: gRPC INTERNAL, reason="BACKEND"."""
    sim.inject_fault({"kind": "error_burst", "reason": "BACKEND"})
    with pytest.raises(InferenceServerException, match="simulated backend failure") as caught:
        grpc.infer("simple", simple_inputs(grpcclient, ROWS, ROWS))
    assert caught.value.status() == "StatusCode.INTERNAL"
    parsed = scrape(sim)
    assert (
        parsed.value("nv_inference_request_failure", model="simple", reason="BACKEND", version="1")
        == 1
    )
    assert parsed.model("nv_inference_exec_count", "simple") == 0


def test_hang_times_clients_out_and_stop_stays_prompt(start_sim: Callable[..., Simulator]) -> None:
    """Hung executions never answer (HTTP times out, gRPC hits its deadline and counts as
    CANCELED); stop() still returns promptly (a smoke bound: 5x its 0.4 s)."""
    sim = start_sim()
    sim.inject_fault(kind="hang", model="simple")
    with pytest.raises(TimeoutError):
        infer_http(sim, network_timeout=0.3, connection_timeout=0.3)
    client = grpcclient.InferenceServerClient(sim.grpc_url)
    with pytest.raises(InferenceServerException) as caught:
        client.infer("simple", simple_inputs(grpcclient, ROWS, ROWS), client_timeout=0.3)
    client.close()
    assert caught.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    assert scrape(sim).model("nv_inference_request_success", "simple") == 0
    sim.clear_faults()  # the HTTP request completes server-side; the gRPC one was cancelled
    wait_for(lambda: scrape(sim).model("nv_inference_request_success", "simple") == 1)
    wait_for(
        lambda: (
            scrape(sim).value(
                "nv_inference_request_failure", model="simple", reason="CANCELED", version="1"
            )
            == 1
        )
    )
    sim.inject_fault(kind="hang", model="simple")
    held = httpclient.InferenceServerClient(sim.http_url.removeprefix("http://"))
    held.async_infer("simple", simple_inputs(httpclient, ROWS, ROWS))
    started = time.monotonic()
    sim.stop()
    support.assert_within_smoke_bound(time.monotonic() - started, 0.4, "stop() with a hung request")
    held.close()


def test_cleared_hang_lets_requests_finish(sim: Simulator) -> None:
    """Requests held by a hang complete once it is lifted, and are counted then."""
    sim.inject_fault(kind="hang")
    client = httpclient.InferenceServerClient(sim.http_url.removeprefix("http://"))
    held = client.async_infer("simple", simple_inputs(httpclient, ROWS, ROWS))
    sim.clear_faults()
    assert held.get_result(timeout=5).as_numpy("OUTPUT0").tolist() == [[2] * 16]
    client.close()
    assert scrape(sim).model("nv_inference_request_success", "simple") == 1


def test_server_wide_hang_blocks_health_but_not_admin(sim: Simulator) -> None:
    """scope=server: even /v2/health/live stalls, while /sim/state still answers."""
    sim.inject_fault(kind="hang", scope="server")
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        fetch(sim.http_url + "/v2/health/live", timeout_s=0.3)
    assert json.loads(fetch(sim.http_url + "/sim/state"))["faults"][0]["scope"] == "server"


def test_malformed_metrics_fail_to_parse_until_cleared(sim: Simulator) -> None:
    """The malformed_metrics fault breaks a Prometheus parser; clearing restores it."""
    sim.inject_fault(kind="malformed_metrics")
    with pytest.raises(ValueError, match=r"Invalid labels|could not convert"):
        parse_scrape(fetch(sim.metrics_url))
    sim.clear_faults()
    assert parse_scrape(fetch(sim.metrics_url)).types["nv_inference_count"] == "counter"


def test_slow_metrics_delay_the_scrape(sim: Simulator) -> None:
    """slow_metrics answers /metrics only after delay_s (a scraper giving up sooner gets
    nothing, a patient one the whole exposition); inference is unaffected."""
    sim.inject_fault(kind="slow_metrics", delay_s=0.4)
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        fetch(sim.metrics_url, timeout_s=0.1)  # a host slower than usual only delays it more
    assert parse_scrape(fetch(sim.metrics_url)).types["nv_inference_count"] == "counter"
    infer_http(sim)


def test_restart_through_the_fault_endpoint(sim: Simulator) -> None:
    """{"kind": "restart"} on /sim/fault resets counters like /sim/restart."""
    infer_http(sim, count=2)
    request = urllib.request.Request(
        sim.http_url + "/sim/fault", data=b'{"kind": "restart"}', method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert json.loads(response.read()) == {"restarted": True, "restarts": 1}
    assert scrape(sim).model("nv_inference_request_success", "simple") == 0
