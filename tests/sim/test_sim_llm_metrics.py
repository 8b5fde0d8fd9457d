"""The LLM families on the simulator's /metrics: names, labels, values, promtool."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from llm_support import llm_model_set

from support import promtool_check_metrics
from tritonwatch.sim.load import stream_closed_loop
from tritonwatch.sim.server import Simulator
from tritonwatch.sim.testing import Scrape, scrape

pytestmark = pytest.mark.real

NAMING_LINT = re.compile(
    r"^\S+ (counter metrics should have \"_total\" suffix"
    r"|metric names should not contain abbreviated units"
    r"|metric name should not include type '(summary|histogram)'"
    r"|non-histogram and non-summary metrics should not have \"_count\" suffix"
    r"|metric names should not contain ':')$"
)
"""promtool's naming advice, which Triton's and vLLM's own names break by design."""


@pytest.fixture
def busy_llm_sim(start_sim: Callable[..., Simulator]) -> Simulator:
    """An LLM simulator with the first-response histogram on, after 2 streams of 5 tokens
    on each LLM model."""
    sim = start_sim(models=llm_model_set(), histogram_latencies=True)
    for model in ("trt", "vl", "pyllm"):
        result = sim.run_async(
            lambda core, model=model: stream_closed_loop(
                core, model, concurrency=2, streams_per_worker=1, prompt_words=10, max_tokens=5
            )
        )
        assert result.completed == 2 and result.tokens == 10
    return sim


def test_the_page_parses_and_promtool_finds_only_naming_advice(busy_llm_sim: Simulator) -> None:
    """Breaks if promtool finds a format error or any advice but the servers' own naming."""
    text = scrape(busy_llm_sim).text
    checked = promtool_check_metrics(text)
    assert checked.returncode in (0, 3), checked.stdout + checked.stderr
    complaints = (checked.stdout + checked.stderr).splitlines()
    assert [line for line in complaints if not NAMING_LINT.match(line)] == []
    assert any(line.startswith("vllm:num_preemptions_total ") for line in complaints)


def vllm(page: Scrape, name: str) -> float:
    return page.value(name, model_name="vl", engine="0")


def trtllm(page: Scrape, family: str, split: str, value: str) -> float:
    return page.value(family, model="trt", version="1", **{split: value})


def test_vllm_families_count_what_was_served(busy_llm_sim: Simulator) -> None:
    """Breaks if vLLM's families lose their labels, _total suffix or the served counts."""
    page = scrape(busy_llm_sim)
    assert page.types["vllm:num_preemptions"] == "counter"
    assert vllm(page, "vllm:generation_tokens") == 10
    assert vllm(page, "vllm:prompt_tokens") == 26
    assert vllm(page, "vllm:num_preemptions") == 0
    assert vllm(page, "vllm:num_requests_running") == 0
    assert vllm(page, "vllm:num_requests_waiting") == 0
    assert vllm(page, "vllm:kv_cache_usage_perc") == 0
    assert vllm(page, "vllm:time_to_first_token_seconds_count") == 2
    assert vllm(page, "vllm:inter_token_latency_seconds_count") == 8
    assert vllm(page, "vllm:e2e_request_latency_seconds_count") == 2
    assert 'vllm:num_preemptions_total{model_name="vl",engine="0"} 0.0' in page.text
    assert "nv_trt_llm" not in "".join(line for line in page.text.splitlines() if '"vl"' in line)


def test_trtllm_families_have_the_v018_split_values(busy_llm_sim: Simulator) -> None:
    """TensorRT-LLM's gauges on Triton's labels, with v0.18's waiting and fraction."""
    page = scrape(busy_llm_sim)
    request = "nv_trt_llm_request_metrics"
    assert trtllm(page, request, "request_type", "max") == 64
    assert trtllm(page, request, "request_type", "waiting") == 0
    assert trtllm(page, request, "request_type", "active") == 0
    kv = "nv_trt_llm_kv_cache_block_metrics"
    assert trtllm(page, kv, "kv_cache_block_type", "max") == 4096
    assert trtllm(page, kv, "kv_cache_block_type", "free") == 4096
    assert trtllm(page, kv, "kv_cache_block_type", "tokens_per") == 16
    assert trtllm(page, kv, "kv_cache_block_type", "fraction") == 0
    batcher = "nv_trt_llm_inflight_batcher_metrics"
    assert trtllm(page, batcher, "inflight_batcher_specific_metric", "paused_requests") == 0
    general = "nv_trt_llm_general_metrics"
    assert trtllm(page, general, "general_type", "iteration_counter") >= 5
    assert (
        'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="trt",version="1"} '
        "4096" in page.text
    )


def test_first_response_histogram_counts_each_decoupled_request(
    busy_llm_sim: Simulator,
) -> None:
    """Breaks if the first-response histogram misses a stream, a bucket, or shows a plain model."""
    page = scrape(busy_llm_sim)
    name = "nv_inference_first_response_histogram_ms"
    assert page.types[name] == "histogram"
    for model in ("trt", "vl", "pyllm"):
        assert page.model(f"{name}_count", model) == 2
        buckets = [
            page.value(f"{name}_bucket", model=model, version="1", le=le)
            for le in ("100", "500", "2000", "5000", "+Inf")
        ]
        assert buckets[-1] == 2 and buckets == sorted(buckets)
    assert f'{name}_count{{model="text"' not in page.text


def test_the_first_response_histogram_is_off_by_default(
    start_sim: Callable[..., Simulator],
) -> None:
    """Without histogram_latencies the family is absent, as in Triton."""
    sim = start_sim(models=llm_model_set())
    assert "nv_inference_first_response_histogram_ms" not in scrape(sim).text


def test_triton_counters_count_a_stream_as_one_request(busy_llm_sim: Simulator) -> None:
    """Breaks if a finished stream is not one success and one execution in Triton's counters."""
    page = scrape(busy_llm_sim)
    assert page.model("nv_inference_request_success", "trt") == 2
    assert page.model("nv_inference_exec_count", "trt") == 2
    assert page.model("nv_inference_pending_request_count", "trt") == 0


def test_a_restart_zeroes_the_llm_counters(busy_llm_sim: Simulator) -> None:
    """A simulated restart resets token and latency counts, as a server restart does."""
    busy_llm_sim.restart()
    page = scrape(busy_llm_sim)
    assert vllm(page, "vllm:generation_tokens") == 0
    assert vllm(page, "vllm:time_to_first_token_seconds_count") == 0
    assert page.model("nv_inference_first_response_histogram_ms_count", "trt") == 0
