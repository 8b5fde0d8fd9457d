"""The response cache per model: hits, misses and their mean times from Triton's
``nv_cache_*_per_model`` families, exported as a hit ratio and two latencies."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pipeline_support import rates, state
from support import fixtures_dir
from tritonwatch.export.pipeline_view import cache_line
from tritonwatch.export.triton_metrics import TritonModelCollector
from tritonwatch.records.observations import CacheRates, ModelKey
from tritonwatch.records.target_state import ModelState
from tritonwatch.scrape.triton_deltas import triton_rates
from tritonwatch.scrape.triton_text import parse_triton_metrics


def _page(ok: int, hits: int, misses: int, hit_us: float, miss_us: float) -> str:
    labels = '{model="cached",version="1"}'
    return "\n".join(
        [
            "# TYPE nv_inference_request_success counter",
            f"nv_inference_request_success{labels} {ok}",
            f"nv_inference_exec_count{labels} {misses}",
            f"nv_inference_request_duration_us{labels} {ok * 300}",
            "# TYPE nv_cache_num_hits_per_model counter",
            f"nv_cache_num_hits_per_model{labels} {hits}",
            "# TYPE nv_cache_num_misses_per_model counter",
            f"nv_cache_num_misses_per_model{labels} {misses}",
            "# TYPE nv_cache_hit_duration_per_model counter",
            f"nv_cache_hit_duration_per_model{labels} {hit_us}",
            "# TYPE nv_cache_miss_duration_per_model counter",
            f"nv_cache_miss_duration_per_model{labels} {miss_us}",
            "",
        ]
    )


def test_hits_misses_and_their_mean_times_over_a_window() -> None:
    """Breaks if the cache families are not read per model: 90 hits and 10 misses in
    10 s are a 0.9 hit ratio, 9 µs per hit (810 µs / 90), 50 µs per miss."""
    before = parse_triton_metrics(_page(100, 50, 50, 450.0, 2500.0), 0.0)
    after = parse_triton_metrics(_page(200, 140, 60, 1260.0, 3000.0), 10.0)
    cache = triton_rates(before, after).models[ModelKey("cached", "1")].cache
    assert cache == CacheRates(
        hits_per_second=pytest.approx(9.0),  # type: ignore[arg-type]
        misses_per_second=pytest.approx(1.0),  # type: ignore[arg-type]
        hit_ratio=pytest.approx(0.9),  # type: ignore[arg-type]
        hit_seconds_average=pytest.approx(9e-6),  # type: ignore[arg-type]
        miss_seconds_average=pytest.approx(50e-6),  # type: ignore[arg-type]
    )


def test_a_window_without_lookups_has_no_ratio() -> None:
    page = parse_triton_metrics(_page(100, 50, 50, 450.0, 2500.0), 0.0)
    later = parse_triton_metrics(_page(100, 50, 50, 450.0, 2500.0), 10.0)
    cache = triton_rates(page, later).models[ModelKey("cached", "1")].cache
    assert cache is not None
    assert (cache.hit_ratio, cache.hit_seconds_average, cache.miss_seconds_average) == (
        None,
        None,
        None,
    )


def test_old_servers_hit_counters_alone_say_nothing_about_a_cache() -> None:
    """Triton 22.x printed nv_cache_num_hits_per_model (0) for every model and no miss
    counter (fixtures sample_05/06): no cache readings, not a 0 % hit ratio."""
    folder = fixtures_dir() / "triton_metrics"
    before = parse_triton_metrics((folder / "sample_05.txt").read_text(), 0.0)
    after = parse_triton_metrics((folder / "sample_06.txt").read_text(), 60.0)
    assert any("nv_cache_num_hits_per_model" in m.counters for m in after.models.values())
    models = triton_rates(before, after).models
    assert models and all(model.cache is None for model in models.values())


def test_cache_gauges_and_the_status_line() -> None:
    cache = CacheRates(9.0, 1.0, 0.9, 9e-6, 50e-6)
    model = ModelState("cached", rates=rates("cached", 0.3, cache=cache))
    plain = ModelState("plain", rates=rates("plain", 5.0))
    registry = CollectorRegistry()
    registry.register(TritonModelCollector(lambda: [state({"cached": model, "plain": plain})]))
    samples = {
        (s.name, s.labels["model"]): s.value
        for f in text_string_to_metric_families(generate_latest(registry).decode())
        for s in f.samples
        if s.name.startswith("tritonwatch_model_cache_")
    }
    assert samples == {
        ("tritonwatch_model_cache_hit_ratio", "cached"): 0.9,
        ("tritonwatch_model_cache_hit_seconds", "cached"): 9e-6,
        ("tritonwatch_model_cache_miss_seconds", "cached"): 50e-6,
    }
    assert cache_line(model) == "response cache: 90% hits · hit 0.01 ms · miss 0.05 ms"
    assert cache_line(plain) is None
