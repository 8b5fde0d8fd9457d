"""The Triton /metrics parser on real published scrapes and on the format's corner cases."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support import fixtures_dir
from tritonwatch.records.observations import ModelKey, RawSeries, TritonScrape
from tritonwatch.scrape import triton_families as f
from tritonwatch.scrape.triton_text import MetricsTextError, parse_labels, parse_triton_metrics

SAMPLES = (
    "sample_01",
    "sample_03",
    "sample_04",
    "sample_05",
    "sample_06",
    "sample_07",
    "sample_08",
)
T4 = "GPU-8331ed5e-e44e-72c7-fba5-ed5d48487989"


def fixture_text(name: str) -> str:
    return (fixtures_dir() / "triton_metrics" / f"{name}.txt").read_text()


def parse(name: str) -> TritonScrape:
    return parse_triton_metrics(fixture_text(name), at=12.5)


def test_sample_01_summary_quantiles_sum_and_count() -> None:
    """The documented summary example: five default quantiles, _sum and _count."""
    scrape = parse("sample_01")
    assert (scrape.samples, scrape.bad_lines, scrape.at) == (7, 0, 12.5)
    summary = scrape.models[ModelKey("my_model", "1")].summaries[f.QUEUE_SUMMARY_US]
    assert dict(summary.quantiles) == {0.5: 55, 0.9: 97, 0.95: 98, 0.99: 101, 0.999: 101}
    assert (summary.sum, summary.count) == (11110, 161)


def test_sample_03_counters_match_the_summary_of_sample_01() -> None:
    """Triton's docs: summary _count = request_success and _sum = queue_duration_us."""
    counters = parse("sample_03").models[ModelKey("my_model", "1")].counters
    summary = parse("sample_01").models[ModelKey("my_model", "1")].summaries[f.QUEUE_SUMMARY_US]
    assert counters[f.REQUEST_SUCCESS] == summary.count == 161
    assert counters[f.QUEUE_DURATION_US] == summary.sum == 11110


def test_sample_04_failure_reasons_pending_cpu_and_pinned_memory() -> None:
    """24.07+ shape: four failure reasons per model, pending gauge, server gauges, no GPU."""
    scrape = parse("sample_04")
    assert set(scrape.models) == {
        ModelKey("densenet_onnx", "1"),
        ModelKey("cc_fraud_detect_model", "1"),
    }
    assert (scrape.samples, scrape.bad_lines) == (31, 0)
    for model in scrape.models.values():
        assert dict(model.failures_by_reason) == {
            "OTHER": 0,
            "BACKEND": 0,
            "CANCELED": 0,
            "REJECTED": 0,
        }
        assert model.counters[f.REQUEST_FAILURE] == 0
        assert dict(model.gauges) == {f.PENDING_REQUESTS: 0}
        assert len(model.counters) == 9
    assert dict(scrape.server) == {
        "nv_pinned_memory_pool_total_bytes": 268435456,
        "nv_pinned_memory_pool_used_bytes": 0,
        "nv_cpu_utilization": 0.02255639097744361,
        "nv_cpu_memory_total_bytes": 16861294592,
        "nv_cpu_memory_used_bytes": 4000546816,
    }
    assert dict(scrape.gpus) == {}


def test_sample_05_counters_gpu_gauges_and_six_decimal_values() -> None:
    """22.x shape: 7 models, values printed as 101.000000, one T4, old cache families."""
    scrape = parse("sample_05")
    assert len(scrape.models) == 7 and (scrape.samples, scrape.bad_lines) == (83, 0)
    gnn = scrape.models[ModelKey("gnn", "1")].counters
    assert gnn[f.REQUEST_SUCCESS] == 1 and gnn[f.REQUEST_DURATION_US] == 47836
    assert scrape.models[ModelKey("embed", "1")].counters[f.REQUEST_DURATION_US] == 986855
    assert scrape.models[ModelKey("filter", "1")].counters[f.COMPUTE_OUTPUT_DURATION_US] == 1734
    assert scrape.models[ModelKey("frnn", "1")].counters[f.CACHE_HITS] == 0
    assert dict(scrape.gpus[T4]) == {
        f.GPU_UTILIZATION: 0,
        f.GPU_MEMORY_TOTAL_BYTES: 15842934784,
        f.GPU_MEMORY_USED_BYTES: 1497366528,
        f.GPU_POWER_USAGE_WATTS: 27.444,
        f.GPU_POWER_LIMIT_WATTS: 70,
        f.GPU_ENERGY_JOULES: 10918.654,
    }
    # The old global cache gauges print HELP and TYPE but no sample.
    assert dict(scrape.server) == {}


def test_sample_06_is_the_later_scrape_of_the_same_server() -> None:
    """sample_06 reads as the later scrape of sample_05's server, counters and GPU energy."""
    scrape = parse("sample_06")
    gnn = scrape.models[ModelKey("gnn", "1")].counters
    assert gnn[f.REQUEST_SUCCESS] == 101 and gnn[f.REQUEST_DURATION_US] == 12857993
    assert scrape.gpus[T4][f.GPU_ENERGY_JOULES] == 21386.444


def test_sample_07_gpu_uuid_split_and_four_gpus() -> None:
    """~21.05 shape: the per-model series carries gpu_uuid; four GPUs report utilisation."""
    scrape = parse("sample_07")
    assert set(scrape.models) == {ModelKey("dlrm", "2")}
    assert dict(scrape.models[ModelKey("dlrm", "2")].counters) == {f.COMPUTE_OUTPUT_DURATION_US: 0}
    assert len(scrape.gpus) == 4
    assert all(dict(gauges) == {f.GPU_UTILIZATION: 0} for gauges in scrape.gpus.values())


def test_gpu_uuid_splits_are_summed_per_model_and_version() -> None:
    """sample_07 with the same model also on a second GPU: one model, the sum of both."""
    second = (
        "nv_inference_compute_output_duration_us"
        '{gpu_uuid="GPU-a644ab9c-6bec-7fa6-1e46-c7fdbf1747f1",model="dlrm",version="2"} 250.000000'
    )
    text = fixture_text("sample_07").replace(
        'version="2"} 0.000000', 'version="2"} 1000.000000\n' + second
    )
    scrape = parse_triton_metrics(text, at=0.0)
    assert scrape.bad_lines == 0
    assert scrape.models[ModelKey("dlrm", "2")].counters[f.COMPUTE_OUTPUT_DURATION_US] == 1250


def test_sample_08_old_failure_counter_and_pending_gauge() -> None:
    """Pre-24.07: no reason label; the failures are reported under the 'unknown' reason."""
    scrape = parse("sample_08")
    model = scrape.models[ModelKey("tensorrt_llm", "1")]
    assert dict(model.failures_by_reason) == {f.UNKNOWN_FAILURE_REASON: 0}
    assert model.gauges[f.PENDING_REQUESTS] == 0
    assert (scrape.samples, scrape.bad_lines, len(model.counters)) == (10, 0, 9)


@pytest.mark.parametrize("name", SAMPLES)
def test_every_fixture_value_agrees_with_prometheus_client(name: str) -> None:
    """Differential check: each sample prometheus_client reads is in our record, same value."""
    text = fixture_text(name)
    scrape = parse_triton_metrics(text, at=0.0)
    reference = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    assert scrape.samples == len(reference)
    for sample in reference:
        assert _our_value(scrape, sample.name, sample.labels) == sample.value, sample


def _our_value(scrape: TritonScrape, series: str, labels: dict[str, str]) -> float:
    name = series.removesuffix("_total")  # prometheus_client adds it to counters
    if "gpu_uuid" in labels and "model" not in labels:
        return scrape.gpus[labels["gpu_uuid"]][name]
    if "model" not in labels:
        return scrape.server[name]
    model = scrape.models[ModelKey(labels["model"], labels["version"])]
    if name == f.REQUEST_FAILURE and "reason" in labels:
        return model.failures_by_reason[labels["reason"]]
    for suffix, part in (("_sum", "sum"), ("_count", "count")):
        if name.endswith(suffix) and name.removesuffix(suffix) in model.summaries:
            value: float | None = getattr(model.summaries[name.removesuffix(suffix)], part)
            assert value is not None
            return value
    if name in model.summaries:
        return model.summaries[name].quantiles[float(labels["quantile"])]
    return {**model.counters, **model.gauges}[name]


def test_idle_summary_prints_nan_and_nan_is_kept() -> None:
    """NaN quantiles of an idle summary, in either spelling, are kept as NaN."""
    text = """# TYPE nv_inference_request_summary_us summary
nv_inference_request_summary_us_count{model="idle",version="1"} 0
nv_inference_request_summary_us_sum{model="idle",version="1"} 0
nv_inference_request_summary_us{model="idle",version="1",quantile="0.5"} Nan
nv_inference_request_summary_us{model="idle",version="1",quantile="0.99"} NaN
"""
    summary = parse_triton_metrics(text, 0.0).models[ModelKey("idle", "1")].summaries
    quantiles = summary[f.REQUEST_SUMMARY_US].quantiles
    assert list(quantiles) == [0.5, 0.99] and all(math.isnan(v) for v in quantiles.values())


def test_first_response_histogram_buckets_are_kept_sorted() -> None:
    """Histogram buckets printed out of order are kept sorted by bound, with sum and count."""
    text = """# TYPE nv_inference_first_response_histogram_ms histogram
nv_inference_first_response_histogram_ms_count{model="m",version="1"} 37
nv_inference_first_response_histogram_ms_sum{model="m",version="1"} 10771
nv_inference_first_response_histogram_ms_bucket{model="m",version="1",le="500"} 30
nv_inference_first_response_histogram_ms_bucket{model="m",version="1",le="100"} 8
nv_inference_first_response_histogram_ms_bucket{model="m",version="1",le="+Inf"} 37
"""
    model = parse_triton_metrics(text, 0.0).models[ModelKey("m", "1")]
    histogram = model.histograms[f.FIRST_RESPONSE_HISTOGRAM_MS]
    assert histogram.buckets == ((100, 8), (500, 30), (math.inf, 37))
    assert (histogram.sum, histogram.count) == (10771, 37)


def test_escaped_label_values_are_unescaped() -> None:
    """Escaped quotes, backslashes and newlines in label values are unescaped."""
    text = r'nv_inference_count{model="a \"quoted\" back\\slash\nnewline",version="1"} 3'
    scrape = parse_triton_metrics(text, 0.0)
    assert list(scrape.models) == [ModelKey('a "quoted" back\\slash\nnewline', "1")]


def test_label_values_may_hold_braces_commas_and_spaces() -> None:
    """Braces, commas, spaces and equals signs inside a label value do not split it."""
    text = 'nv_inference_count{model="x} {y, z=\\"1\\"",version="1"} 3\n'
    assert list(parse_triton_metrics(text, 0.0).models) == [ModelKey('x} {y, z="1"', "1")]


def test_what_prometheus_also_accepts() -> None:
    """Timestamps, blanks around the parts, CRLF, trailing commas, ±Inf, comments after blanks."""
    text = (
        "  # a comment after blanks\r\n"
        'nv_inference_count{model="a",version="1"} 5 1700000000000\r\n'
        '  nv_inference_exec_count { model = "a" , version = "1" , }  2  \r\n'
        "nv_cpu_utilization\t+Inf\n"
        "nv_cpu_memory_used_bytes -Inf\n"
        "\n   \n"
    )
    scrape = parse_triton_metrics(text, 0.0)
    assert (scrape.samples, scrape.bad_lines) == (4, 0)
    counters = scrape.models[ModelKey("a", "1")].counters
    assert dict(counters) == {f.INFERENCE_COUNT: 5, f.EXEC_COUNT: 2}
    assert scrape.server["nv_cpu_utilization"] == math.inf
    assert scrape.server["nv_cpu_memory_used_bytes"] == -math.inf


BAD_LINES = [
    'nv_inference_count{model="a",version="1"}',  # no value
    'nv_inference_count{model="a",version="1"} one',  # not a number
    'nv_inference_count{model="a",version="1"} 1_000',  # Python float takes it, Prometheus not
    'nv_inference_count{model="a",version="1"} \u0661',  # an Arabic-Indic digit one
    'nv_inference_count{model="a",version="1"} 1 2 3',  # too many fields
    'nv_inference_count{model="a",version="1"} 1 soon',  # bad timestamp
    'nv_inference_count{model="a",version="1" 1',  # unclosed label set
    'nv_inference_count{model="a,version="1"} 1',  # unbalanced quotes
    'nv_inference_count{model=a,version="1"} 1',  # unquoted value
    'nv_inference_count{model="a\\t",version="1"} 1',  # invalid escape
    'nv_inference_count{model="a",model="b"} 1',  # repeated label
    'nv_inference_count{1model="a"} 1',  # bad label name
    'nv_inference_count{version="1"} 1',  # a per-model family without model
    "nv_gpu_utilization 0.5",  # a per-GPU family without gpu_uuid
    'nv_inference_queue_summary_us{model="a",version="1"} 3',  # quantile missing
    'nv_inference_queue_summary_us{model="a",version="1",quantile="p99"} 3',  # bad quantile
    "9lives 1",  # bad metric name
    "{} 1",  # no name
    "garbage",
]


@pytest.mark.parametrize("line", BAD_LINES)
def test_a_bad_line_is_counted_and_the_rest_still_parses(line: str) -> None:
    """Each kind of malformed line counts as one bad line; every other sample is still read."""
    text = fixture_text("sample_04").replace(
        "# HELP nv_inference_count", f"{line}\n# HELP nv_inference_count"
    )
    scrape = parse_triton_metrics(text, 0.0)
    assert (scrape.bad_lines, scrape.samples) == (1, 31)
    assert scrape.server["nv_cpu_memory_used_bytes"] == 4000546816


def test_a_repeated_series_is_a_bad_line_and_the_first_value_wins() -> None:
    """A series repeated on one page counts as a bad line and its first value is kept."""
    text = (
        'nv_inference_count{model="a",version="1"} 1\nnv_inference_count{model="a",version="1"} 9\n'
    )
    scrape = parse_triton_metrics(text, 0.0)
    assert scrape.bad_lines == 1
    assert scrape.models[ModelKey("a", "1")].counters[f.INFERENCE_COUNT] == 1


def test_unknown_families_are_passed_over_or_kept_raw() -> None:
    """Backend families we do not model (SGLang, custom) never disturb the known ones."""
    text = (
        fixture_text("sample_08")
        + "# TYPE sglang:num_running_reqs gauge\n"
        + 'sglang:num_running_reqs{tp_rank="0"} 1\n'
        + 'nv_custom_backend_queue{model_name="llama"} 3\n'
    )
    plain = parse_triton_metrics(text, 0.0)
    assert plain.unknown_families == {"sglang:num_running_reqs", "nv_custom_backend_queue"}
    assert plain.unknown_series == () and plain.bad_lines == 0 and plain.samples == 12
    assert list(plain.models) == [ModelKey("tensorrt_llm", "1")]
    kept = parse_triton_metrics(text, 0.0, keep_unknown=True)
    assert set(kept.unknown_series) == {
        RawSeries("sglang:num_running_reqs", (("tp_rank", "0"),), 1.0),
        RawSeries("nv_custom_backend_queue", (("model_name", "llama"),), 3.0),
    }


def test_bytes_are_read_as_utf8() -> None:
    """A page given as bytes is read as UTF-8, the same as text."""
    raw = (fixtures_dir() / "triton_metrics" / "sample_05.txt").read_bytes()
    assert parse_triton_metrics(raw, 0.0).samples == 83


@pytest.mark.parametrize("page", [b"\xff\xfe not utf-8", None, 42, ["a list"]])
def test_input_that_is_not_text_raises_our_typed_error(page: object) -> None:
    """Non-UTF-8 bytes or a non-text page raise MetricsTextError, nothing else."""
    with pytest.raises(MetricsTextError):
        parse_triton_metrics(page, 0.0)  # type: ignore[arg-type]


def test_the_record_is_immutable() -> None:
    """A parsed scrape cannot be changed by the code that reads it."""
    scrape = parse("sample_05")
    with pytest.raises(TypeError):
        scrape.models[ModelKey("gnn", "1")].counters[f.REQUEST_SUCCESS] = 5  # type: ignore[index]
    with pytest.raises(AttributeError):
        scrape.bad_lines = 3  # type: ignore[misc]


def test_parse_labels_reports_malformed_sets() -> None:
    """Label sets with spaces parse; a repeated or comma-less label set is refused."""
    assert parse_labels(' a = "1" , b="x=\\"y\\"" , ') == {"a": "1", "b": 'x="y"'}
    with pytest.raises(ValueError, match="repeated"):
        parse_labels('a="1",a="2"')
    with pytest.raises(ValueError, match="malformed"):
        parse_labels('a="1" b="2"')


def test_every_published_sample_parses_without_a_bad_line() -> None:
    """Breaks if the parser counts a line a real Triton printed as bad, in any sample."""
    published = sorted(
        path.stem for path in (fixtures_dir() / "triton_metrics").glob("sample_??.txt")
    )
    assert published == list(SAMPLES)  # each sample is checked here, none went missing
    for name in SAMPLES:
        scrape = parse(name)
        assert scrape.bad_lines == 0, name
        assert scrape.samples > 0 and scrape.models, name
