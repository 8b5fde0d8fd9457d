"""``/metrics`` fidelity against real Triton scrapes, and Triton's update rules."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from tritonwatch.sim.server import Simulator
from tritonwatch.sim.testing import fetch, model_set_with, parse_scrape, scrape, simple_inputs

pytestmark = pytest.mark.sim

# Newest first: for a family several fixtures show, the newest server's shape is the one
# to match (the failure `reason` label appeared in 24.07, `gpu_uuid` left per-model
# series after ~21.05).
FIXTURES_NEWEST_FIRST = (
    "sample_04",
    "sample_01",
    "sample_08",
    "sample_06",
    "sample_05",
    "sample_07",
)


def families(text: str) -> dict[str, tuple[str, str, frozenset[frozenset[str]]]]:
    """family → (type, help, set of label-name sets over its samples)."""
    found = {}
    for family in text_string_to_metric_families(text):
        labels = frozenset(frozenset(sample.labels) for sample in family.samples)
        found[family.name] = (family.type, family.documentation, labels)
    return found


@pytest.fixture
def busy_sim(start_sim: Callable[..., Simulator]) -> Simulator:
    """Summaries on; a few requests on ``simple``, ``resnet50`` left idle."""
    sim = start_sim(summary_latencies=True)
    client = httpclient.InferenceServerClient(sim.http_url.removeprefix("http://"))
    rows = np.ones((2, 16), dtype=np.int32)
    for _ in range(5):
        client.infer("simple", simple_inputs(httpclient, rows, rows))
    client.close()
    sim.poll_metrics()
    return sim


def test_types_help_and_labels_match_real_scrapes(busy_sim: Simulator, fixtures_dir: Path) -> None:
    """Every family we share with a real scrape has its TYPE and HELP, and the newest
    server's label names."""
    ours = families(fetch(busy_sim.metrics_url))
    checked = set()
    for sample in FIXTURES_NEWEST_FIRST:
        real = families((fixtures_dir / "triton_metrics" / f"{sample}.txt").read_text())
        for name, (kind, help_text, labels) in real.items():
            if name not in ours:
                continue
            assert ours[name][0] == kind, (sample, name)
            if name in checked:
                continue  # a newer fixture already fixed its labels and help
            checked.add(name)
            assert ours[name][1] == help_text, (sample, name)
            if labels != frozenset():  # families printed without samples say nothing
                assert ours[name][2] == labels, (sample, name)
    assert {
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_queue_summary_us",
        "nv_inference_pending_request_count",
        "nv_gpu_utilization",
        "nv_energy_consumption",
        "nv_cpu_utilization",
    } <= checked


def test_text_is_triton_shaped(busy_sim: Simulator) -> None:
    """Counters without _total, failure reasons, integral counts, Nan for idle summaries."""
    text = fetch(busy_sim.metrics_url)
    names = {
        line.split("{")[0].split(" ")[0] for line in text.splitlines() if line.startswith("nv_")
    }
    assert not [name for name in names if name.endswith("_total")]
    for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER"):
        assert (
            f'nv_inference_request_failure{{model="simple",reason="{reason}",version="1"}} 0'
            in text
        )
    assert 'nv_inference_request_success{model="simple",version="1"} 5\n' in text
    assert 'nv_inference_count{model="simple",version="1"} 10\n' in text
    assert (
        'nv_inference_request_summary_us{model="resnet50",version="1",quantile="0.5"} Nan' in text
    )
    assert "# TYPE nv_energy_consumption counter" in text


def test_summaries_agree_with_counters(busy_sim: Simulator) -> None:
    """Each summary's _count is the success counter and its _sum the duration counter."""
    parsed = scrape(busy_sim)
    success = parsed.model("nv_inference_request_success", "simple")
    for stage in ("request", "queue", "compute_input", "compute_infer", "compute_output"):
        assert parsed.model(f"nv_inference_{stage}_summary_us_count", "simple") == success
        assert parsed.model(f"nv_inference_{stage}_summary_us_sum", "simple") == parsed.model(
            f"nv_inference_{stage}_duration_us", "simple"
        )
    median = parsed.value(
        "nv_inference_request_summary_us", model="simple", version="1", quantile="0.5"
    )
    assert 0 < median <= parsed.model("nv_inference_request_duration_us", "simple")


def test_counters_move_only_when_requests_complete(start_sim: Callable[..., Simulator]) -> None:
    """While executions hang nothing is counted; queued requests show as pending."""
    sim = start_sim(models=model_set_with(simple={"dynamic_batching": None}))
    sim.inject_fault(kind="hang", model="simple")
    client = httpclient.InferenceServerClient(sim.http_url.removeprefix("http://"), concurrency=3)
    rows = np.ones((1, 16), dtype=np.int32)
    pending = [
        client.async_infer("simple", simple_inputs(httpclient, rows, rows)) for _ in range(3)
    ]
    sim.run_async(lambda core: _until(core, lambda: core.repository.pending("simple") == 2))
    during = scrape(sim)
    assert during.model("nv_inference_request_success", "simple") == 0
    assert during.model("nv_inference_exec_count", "simple") == 0
    assert during.model("nv_inference_pending_request_count", "simple") == 2
    sim.clear_faults()
    for request in pending:
        assert request.get_result(timeout=5).as_numpy("OUTPUT0").tolist() == [[2] * 16]
    after = scrape(sim)
    assert after.model("nv_inference_request_success", "simple") == 3
    assert after.model("nv_inference_exec_count", "simple") == 3
    assert after.model("nv_inference_pending_request_count", "simple") == 0
    client.close()


async def _until(core: object, condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Waits on the simulator's loop until ``condition`` holds (yielding between checks)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.001)


def test_parser_accepts_every_scrape(busy_sim: Simulator) -> None:
    """prometheus_client parses the whole exposition, summaries included."""
    parsed = parse_scrape(fetch(busy_sim.metrics_url))
    assert parsed.types["nv_inference_request_summary_us"] == "summary"
    assert parsed.types["nv_inference_request_success"] == "counter"
    assert parsed.types["nv_gpu_utilization"] == "gauge"
