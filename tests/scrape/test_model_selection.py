"""Only configured models are kept; a model configured without a version is all its versions."""

from __future__ import annotations

from support import fixtures_dir
from tritonwatch.observations import ModelKey
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
