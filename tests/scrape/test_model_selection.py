"""Only configured models are kept; a model configured without a version is all its versions."""

from __future__ import annotations

from support import fixtures_dir
from tritonwatch.records.observations import ModelKey
from tritonwatch.scrape import triton_families as f
from tritonwatch.scrape.model_selection import select_models
from tritonwatch.scrape.triton_text import parse_triton_metrics

TWO_VERSIONS = """\
nv_inference_request_success{model="m",version="1"} 10
nv_inference_request_success{model="m",version="2"} 5
nv_inference_request_failure{model="m",reason="REJECTED",version="1"} 1
nv_inference_request_failure{model="m",reason="REJECTED",version="2"} 2
nv_inference_pending_request_count{model="m",version="1"} 3
nv_inference_pending_request_count{model="m",version="2"} 4
nv_inference_request_summary_us{model="m",version="2",quantile="0.5"} 100
nv_inference_request_summary_us_sum{model="m",version="2"} 500
nv_inference_request_summary_us_count{model="m",version="2"} 5
nv_inference_request_success{model="other",version="1"} 99
"""


def test_unconfigured_models_are_left_out() -> None:
    """sample_05 lists 7 models; watching 2 (one absent from the page) keeps 1."""
    page = parse_triton_metrics(
        (fixtures_dir() / "triton_metrics" / "sample_05.txt").read_text(), 0
    )
    wanted = [ModelKey("gnn", "1"), ModelKey("not-loaded", "")]
    selected = select_models(page, wanted)
    assert list(selected.models) == [ModelKey("gnn", "1")]
    assert selected.models[ModelKey("gnn", "1")] is page.models[ModelKey("gnn", "1")]
    assert selected.gpus == page.gpus  # server-wide readings stay


def test_versions_are_summed_without_a_configured_version() -> None:
    """A model without a version sums its versions' counters and gauges, dropping summaries."""
    page = parse_triton_metrics(TWO_VERSIONS, 0.0)
    merged = select_models(page, [ModelKey("m", "")]).models[ModelKey("m", "")]
    assert merged.counters[f.REQUEST_SUCCESS] == 15
    assert dict(merged.failures_by_reason) == {"REJECTED": 3}
    assert merged.gauges[f.PENDING_REQUESTS] == 7
    assert merged.summaries == {}  # quantiles of two versions do not combine


def test_a_configured_version_is_that_version_only() -> None:
    """A configured version keeps that version's counters and summaries only."""
    page = parse_triton_metrics(TWO_VERSIONS, 0.0)
    only = select_models(page, [ModelKey("m", "2")]).models[ModelKey("m", "2")]
    assert only.counters[f.REQUEST_SUCCESS] == 5
    assert only.summaries[f.REQUEST_SUMMARY_US].count == 5


def test_a_single_version_keeps_its_summaries() -> None:
    """A model with one version keeps its summaries when watched without a version."""
    page = parse_triton_metrics(TWO_VERSIONS.replace('version="2"', 'version="1"'), 0.0)
    (merged,) = select_models(page, [ModelKey("m", "")]).models.values()
    assert merged.version == ""
    assert merged.summaries[f.REQUEST_SUMMARY_US].quantiles[0.5] == 100


ENGINE_BESIDE_TRITON = """\
nv_inference_request_success{model="llm",version="1"} 7
vllm:kv_cache_usage_perc{model_name="llm",engine="0"} 0.97
vllm:num_requests_waiting{model_name="llm",engine="0"} 3
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="llm",engine="0"} 2
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="llm",engine="0"} 4
vllm:time_to_first_token_seconds_sum{model_name="llm",engine="0"} 0.9
vllm:time_to_first_token_seconds_count{model_name="llm",engine="0"} 4
"""


def test_an_unversioned_engine_part_keeps_its_llm_values_beside_triton_versions() -> None:
    """Breaks if merging Triton's version "1" with a vLLM engine's model_name families
    (version "") drops the engine's KV-cache, queue and TTFT readings."""
    page = parse_triton_metrics(ENGINE_BESIDE_TRITON, 0.0)
    assert len([k for k in page.models if k.model == "llm"]) == 2  # two parts to merge
    merged = select_models(page, [ModelKey("llm", "")]).models[ModelKey("llm", "")]
    assert merged.counters[f.REQUEST_SUCCESS] == 7
    assert dict(merged.llm) == {k: v for p in page.models.values() for k, v in p.llm.items()}
    assert 0.97 in merged.llm.values() and 3.0 in merged.llm.values()
    assert len(merged.histograms) == 1


def test_two_versions_with_llm_values_drop_them() -> None:
    """Breaks if two versions' KV-cache ratios are summed into one (a ratio over 1)."""
    text = (
        'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="m",version="1"} 0.6\n'
        'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="m",version="2"} 0.7\n'
    )
    page = parse_triton_metrics(text, 0.0)
    merged = select_models(page, [ModelKey("m", "")]).models[ModelKey("m", "")]
    assert dict(merged.llm) == {}
