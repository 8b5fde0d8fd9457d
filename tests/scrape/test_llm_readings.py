"""LLM readings of every published or constructed page in tests/fixtures/llm_metrics:
each number from the name the page printed, and None where it printed none."""

from __future__ import annotations

import math

import pytest

from support import fixtures_dir
from tritonwatch.records.llm_records import ITL, TTFT, LlmReadings
from tritonwatch.records.observations import ModelCounters, ModelKey
from tritonwatch.scrape.llm_readings import llm_readings
from tritonwatch.scrape.triton_text import parse_triton_metrics

LLAMA = ModelKey("meta-llama/Llama-3.1-8B-Instruct", "")
FIXTURES = (
    "trtllm_v0.14",
    "trtllm_v0.18",
    "vllm_server_v1",
    "vllm_server_v0",
    "vllm_backend_triton",
    "first_response",
)


def model(fixture: str, key: ModelKey) -> ModelCounters:
    text = (fixtures_dir() / "llm_metrics" / f"{fixture}.txt").read_text()
    return parse_triton_metrics(text, at=0.0).models[key]


def readings(fixture: str, key: ModelKey) -> LlmReadings:
    found = llm_readings(model(fixture, key))
    assert found is not None
    return found


@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_fixture_parses_without_a_bad_line_and_has_a_source_note(fixture: str) -> None:
    """Breaks if the parser stops reading an LLM page cleanly or a fixture loses its note."""
    folder = fixtures_dir() / "llm_metrics"
    scrape = parse_triton_metrics((folder / f"{fixture}.txt").read_text(), at=0.0)
    assert scrape.bad_lines == 0
    assert scrape.models
    note = (folder / f"{fixture}.source.txt").read_text()
    assert note.startswith("Source: ")
    assert ("verbatim" in note) or ("constructed" in note)


def test_trtllm_v014_kv_usage_is_used_over_max_and_nothing_waits() -> None:
    """Breaks if the pre-v0.18 page (no fraction, no waiting) is read by a version guess."""
    found = readings("trtllm_v0.14", ModelKey("tensorrt_llm", "1"))
    assert found.backend == "tensorrt_llm"
    assert found.kv_cache_usage_ratio == pytest.approx(1 / 6239)
    assert (found.kv_blocks_used, found.kv_blocks_max) == (1.0, 6239.0)
    assert found.requests_running == 1.0  # scheduled, not active (0)
    assert found.requests_max == 512.0
    assert found.requests_waiting is None  # not printed before v0.18: unknown, not 0
    assert found.preemptions_total is None
    assert found.paused_requests is None
    assert found.prompt_tokens_total is None and found.generation_tokens_total is None
    assert dict(found.histograms) == {}


def test_trtllm_v018_fraction_wins_over_used_and_max_and_waiting_is_read() -> None:
    """Breaks if the v0.18 fraction or waiting count is ignored when present."""
    found = readings("trtllm_v0.18", ModelKey("tensorrt_llm", "1"))
    assert found.kv_cache_usage_ratio == 0.4875  # the page's fraction, not 1/6239
    assert found.requests_waiting == 1.0
    assert found.requests_running == 1.0
    assert found.requests_max == 512.0
    counters = model("trtllm_v0.18", ModelKey("tensorrt_llm", "1"))
    assert counters.llm[("nv_trt_llm_disaggregated_serving_metrics", "request_count")] == 0.0
    assert counters.llm[("nv_trt_llm_runtime_memory_metrics", "gpu")] == 1610236.0
    assert counters.llm[("nv_trt_llm_general_metrics", "timestamp")] == 1700074049.0


def test_vllm_server_v1_sums_engines_and_takes_the_fullest_kv_cache() -> None:
    """Breaks if data-parallel engines are not folded: counts summed, KV usage maxed."""
    found = readings("vllm_server_v1", LLAMA)
    assert found.backend == "vllm"
    assert found.kv_cache_usage_ratio == 0.97  # max(0.97, 0.81), not 1.78
    assert found.requests_running == 14.0
    assert found.requests_waiting == 4.0
    assert found.preemptions_total == 14.0
    assert found.prompt_tokens_total == 121234.0
    assert found.generation_tokens_total == 40000.0
    assert found.requests_max is None and found.kv_blocks_max is None
    ttft = found.histograms[TTFT]
    assert ttft.buckets == ((0.1, 190.0), (math.inf, 200.0))
    assert (ttft.sum, ttft.count) == (pytest.approx(10.0), 200.0)
    itl = found.histograms[ITL]  # inter_token_latency_seconds
    assert (itl.sum, itl.count) == (409.695, 27313.0)


def test_vllm_server_v0_reads_the_old_names() -> None:
    """Breaks if gpu_cache_usage_perc or time_per_output_token_seconds stop being read."""
    found = readings("vllm_server_v0", LLAMA)
    assert found.kv_cache_usage_ratio == 0.42
    assert found.requests_running == 8.0
    assert found.requests_waiting == 0.0  # printed as 0: present, so 0, not None
    assert found.preemptions_total == 0.0
    assert found.generation_tokens_total == 27453.0
    assert found.histograms[TTFT].count == 140.0
    assert found.histograms[TTFT].buckets[3] == (0.02, 13.0)
    assert found.histograms[ITL].count == 27313.0


def test_vllm_backend_on_triton_has_tokens_and_histograms_but_no_gauges() -> None:
    """Breaks if the Triton vLLM backend's missing gauges are read as zeros."""
    found = readings("vllm_backend_triton", ModelKey("vllm_model", "1"))
    assert found.backend == "vllm"
    assert found.prompt_tokens_total == 10.0
    assert found.generation_tokens_total == 16.0
    for absent in (
        found.kv_cache_usage_ratio,
        found.requests_running,
        found.requests_waiting,
        found.preemptions_total,
    ):
        assert absent is None
    assert found.histograms[TTFT].sum == pytest.approx(0.03233122825622559)
    assert found.histograms[ITL].buckets == ((0.01, 14.0), (math.inf, 15.0))


def test_triton_first_response_histogram_is_the_ttft_in_seconds() -> None:
    """Breaks if Triton's millisecond first-response histogram is not converted to seconds."""
    found = readings("first_response", ModelKey("my_model", "1"))
    assert found.backend == "triton"
    ttft = found.histograms[TTFT]
    assert ttft.buckets == ((0.1, 8.0), (0.5, 30.0), (2.0, 36.0), (5.0, 37.0), (math.inf, 37.0))
    assert ttft.sum == pytest.approx(10.771)
    assert ttft.count == 37.0
    assert ITL not in found.histograms
    assert found.kv_cache_usage_ratio is None


def test_vllm_ttft_is_preferred_over_triton_first_response() -> None:
    """Breaks if a page with both TTFT histograms reads Triton's instead of the engine's."""
    text = (
        'nv_inference_first_response_histogram_ms_bucket{model="m",version="1",le="+Inf"} 5\n'
        'nv_inference_first_response_histogram_ms_sum{model="m",version="1"} 900\n'
        'nv_inference_first_response_histogram_ms_count{model="m",version="1"} 5\n'
        'vllm:time_to_first_token_seconds_bucket{model="m",version="1",le="+Inf"} 4\n'
        'vllm:time_to_first_token_seconds_sum{model="m",version="1"} 0.2\n'
        'vllm:time_to_first_token_seconds_count{model="m",version="1"} 4\n'
    )
    counters = parse_triton_metrics(text, 0.0).models[ModelKey("m", "1")]
    found = llm_readings(counters)
    assert found is not None and found.backend == "vllm"
    assert (found.histograms[TTFT].sum, found.histograms[TTFT].count) == (0.2, 4.0)


def test_trtllm_token_histograms_give_the_token_totals() -> None:
    """Breaks if TRT-LLM's token-length histograms (v0.16+) are not the token totals."""
    text = (
        'nv_llm_output_token_len_bucket{model="t",response_metric_type="total_output_tokens",'
        'version="1",le="+Inf"} 3\n'
        'nv_llm_output_token_len_sum{model="t",response_metric_type="total_output_tokens",'
        'version="1"} 192\n'
        'nv_llm_input_token_len_sum{model="t",response_metric_type="total_input_tokens",'
        'version="1"} 1500\n'
        'nv_trt_llm_inflight_batcher_metrics{inflight_batcher_specific_metric="paused_requests",'
        'model="t",version="1"} 2\n'
        'nv_trt_llm_request_metrics{model="t",request_type="active",version="1"} 7\n'
    )
    found = llm_readings(parse_triton_metrics(text, 0.0).models[ModelKey("t", "1")])
    assert found is not None
    assert (found.generation_tokens_total, found.prompt_tokens_total) == (192.0, 1500.0)
    assert found.paused_requests == 2.0
    assert found.requests_running == 7.0  # active, since scheduled is not printed
    assert found.kv_cache_usage_ratio is None


def test_a_plain_triton_model_has_no_llm_readings() -> None:
    """Breaks if every model gets an all-None LLM record (exported as empty LLM series)."""
    text = 'nv_inference_request_success{model="plain",version="1"} 3\n'
    assert llm_readings(parse_triton_metrics(text, 0.0).models[ModelKey("plain", "1")]) is None


def test_trtllm_kv_used_with_max_zero_is_unknown() -> None:
    """Breaks if a KV pool of 0 blocks divides by zero or reads as empty."""
    text = (
        'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="t",version="1"} 0\n'
        'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="t",version="1"} 0\n'
    )
    found = llm_readings(parse_triton_metrics(text, 0.0).models[ModelKey("t", "1")])
    assert found is not None and found.kv_cache_usage_ratio is None
