"""The parser's LLM support: vLLM's ``model_name`` label, folding over ``engine``, split
labels kept by value, and label order not mattering."""

from __future__ import annotations

from tritonwatch.records.observations import ModelKey
from tritonwatch.scrape.llm_families import LLM_FAMILIES, LLM_FAMILIES_BY_NAME
from tritonwatch.scrape.triton_families import FAMILIES_BY_NAME
from tritonwatch.scrape.triton_text import parse_triton_metrics


def test_model_name_stands_in_for_model_with_an_empty_version() -> None:
    """Breaks if a vLLM server's series (model_name, no model label) are dropped as bad."""
    text = 'vllm:num_requests_running{model_name="llama"} 3\n'
    scrape = parse_triton_metrics(text, 0.0)
    assert scrape.bad_lines == 0
    assert scrape.models[ModelKey("llama", "")].llm == {("vllm:num_requests_running", ""): 3.0}


def test_model_wins_over_model_name_when_both_are_present() -> None:
    """Breaks if the Triton model label loses to a model_name label beside it."""
    text = 'vllm:num_requests_running{model="triton_name",model_name="hf/x",version="2"} 1\n'
    assert list(parse_triton_metrics(text, 0.0).models) == [ModelKey("triton_name", "2")]


def test_counts_sum_over_engines_and_usage_takes_the_maximum() -> None:
    """Breaks if engines are not folded, or the usage ratio is summed past 1."""
    text = (
        'vllm:num_requests_waiting{engine="0",model_name="m"} 2\n'
        'vllm:num_requests_waiting{engine="1",model_name="m"} 5\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.6\n'
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.9\n'
        'vllm:kv_cache_usage_perc{engine="2",model_name="m"} 0.7\n'
        'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.6\n'
        'vllm:gpu_cache_usage_perc{engine="1",model_name="m"} 0.9\n'
        'vllm:num_preemptions_total{engine="0",model_name="m"} 4\n'
        'vllm:num_preemptions_total{engine="1",model_name="m"} 6\n'
    )
    llm = parse_triton_metrics(text, 0.0).models[ModelKey("m", "")].llm
    assert llm == {
        ("vllm:num_requests_waiting", ""): 7.0,
        ("vllm:kv_cache_usage_perc", ""): 0.9,
        ("vllm:gpu_cache_usage_perc", ""): 0.9,
        ("vllm:num_preemptions_total", ""): 10.0,
    }


def test_histograms_sum_their_buckets_over_engines() -> None:
    """Breaks if per-engine histogram lines are not added into one histogram."""
    text = (
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="m"} 3\n'
        'vllm:time_to_first_token_seconds_bucket{engine="1",le="0.5",model_name="m"} 1\n'
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4\n'
        'vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 2\n'
        'vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 4\n'
        'vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 2\n'
        'vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.5\n'
        'vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 0.5\n'
    )
    histogram = (
        parse_triton_metrics(text, 0.0)
        .models[ModelKey("m", "")]
        .histograms["vllm:time_to_first_token_seconds"]
    )
    assert histogram.buckets == ((0.5, 4.0), (float("inf"), 6.0))
    assert (histogram.sum, histogram.count) == (2.0, 6.0)


def test_label_order_does_not_matter() -> None:
    """Breaks if two orders of the same labels are read as different series or models."""
    a = (
        'vllm:num_requests_running{model_name="m",engine="0"} 1\n'
        'nv_trt_llm_request_metrics{model="t",request_type="max",version="1"} 512\n'
    )
    b = (
        'vllm:num_requests_running{engine="0",model_name="m"} 1\n'
        'nv_trt_llm_request_metrics{version="1",request_type="max",model="t"} 512\n'
    )
    first, second = parse_triton_metrics(a, 0.0), parse_triton_metrics(b, 0.0)
    assert first.models == second.models
    assert first.models[ModelKey("t", "1")].llm == {("nv_trt_llm_request_metrics", "max"): 512.0}


def test_unknown_split_values_are_kept_and_not_bad_lines() -> None:
    """Breaks if a newer backend's split value (not in the table) is dropped or counted bad."""
    text = (
        'nv_trt_llm_request_metrics{model="t",request_type="evicted",version="1"} 3\n'
        'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="host_used",model="t",'
        'version="1"} 9\n'
    )
    scrape = parse_triton_metrics(text, 0.0)
    assert scrape.bad_lines == 0 and scrape.unknown_families == frozenset()
    assert scrape.models[ModelKey("t", "1")].llm == {
        ("nv_trt_llm_request_metrics", "evicted"): 3.0,
        ("nv_trt_llm_kv_cache_block_metrics", "host_used"): 9.0,
    }


def test_llm_values_stay_out_of_the_triton_counters_and_gauges() -> None:
    """Breaks if LLM families leak into the tables the Triton rates read."""
    text = (
        'nv_inference_request_success{model="t",version="1"} 5\n'
        'nv_trt_llm_request_metrics{model="t",request_type="active",version="1"} 2\n'
        'vllm:prompt_tokens_total{model="t",version="1"} 10\n'
    )
    counters = parse_triton_metrics(text, 0.0).models[ModelKey("t", "1")]
    assert dict(counters.counters) == {"nv_inference_request_success": 5.0}
    assert dict(counters.gauges) == {}
    assert set(counters.llm) == {
        ("nv_trt_llm_request_metrics", "active"),
        ("vllm:prompt_tokens_total", ""),
    }


def test_the_llm_table_names_no_triton_family_and_no_name_twice() -> None:
    """Breaks if an LLM family shadows a Triton one or is listed twice."""
    assert len(LLM_FAMILIES_BY_NAME) == len(LLM_FAMILIES)
    assert not set(LLM_FAMILIES_BY_NAME) & set(FAMILIES_BY_NAME)
    for family in LLM_FAMILIES:
        assert family.name.startswith(("nv_trt_llm_", "nv_llm_", "vllm:"))
        assert (family.split_label is not None) == family.name.startswith("nv_trt_llm_")
