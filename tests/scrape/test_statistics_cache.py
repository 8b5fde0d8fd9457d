"""The response cache from the statistics API: ``inference_stats.cache_hit`` and
``cache_miss`` {count, ns} read, turned into rates between two reads (reset-aware), and
used for a model's cache readings when its ``/metrics`` page lacks the per-model cache
families (``/metrics`` wins when both are there).

The documents are real: recorded from tritonserver 2.51.0 (tests/real_triton.py, the
local cache, the ``cached`` and ``prep`` test models) with ``GET /v2/models/cached/stats``
and ``GET /v2/models/stats`` over HTTP, and the ``ModelStatistics`` RPC printed as
tritonclient prints it (``MessageToJson(..., preserving_proto_field_name=True)``). Traffic:
one request to ``prep``, one to ``cached`` (a miss) → :data:`READ_1`; the same bytes twice
more (two hits) and new bytes once (a miss) → :data:`READ_2`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sim_traffic import FakeClock

from pipeline_support import python_config, rates
from stub_server import Route, StubServer
from tritonwatch.config.schema import TargetConfig
from tritonwatch.export.pipeline_view import cache_line
from tritonwatch.export.triton_metrics import TritonModelCollector
from tritonwatch.records.observations import CacheRates, ModelKey, ModelStatistics
from tritonwatch.records.target_state import ModelState, TargetState
from tritonwatch.scrape.target_scraper import TargetScraper
from tritonwatch.scrape.triton_stats import (
    batch_statistics_rates,
    parse_all_model_statistics,
    parse_model_statistics,
)

READ_1 = json.loads(
    '{"model_stats":[{"name":"cached","version":"1","last_inference":1796521534133,'
    '"inference_count":1,"execution_count":1,"inference_stats":{"success":{"count":1,'
    '"ns":54692431},"fail":{"count":0,"ns":0},"queue":{"count":1,"ns":56416},'
    '"compute_input":{"count":1,"ns":28423},"compute_infer":{"count":1,"ns":54418005},'
    '"compute_output":{"count":1,"ns":134783},"cache_hit":{"count":0,"ns":0},'
    '"cache_miss":{"count":1,"ns":50646}},"response_stats":{},"batch_stats":[{"batch_size":1,'
    '"compute_input":{"count":1,"ns":28423},"compute_infer":{"count":1,"ns":54418005},'
    '"compute_output":{"count":1,"ns":134783}}],"memory_usage":[]}]}'
)
READ_1_GRPC = json.loads(
    '{"model_stats": [{"name": "cached", "version": "1", "last_inference": "1796521534133", '
    '"inference_count": "1", "execution_count": "1", "inference_stats": {"success": {"count": '
    '"1", "ns": "54692431"}, "fail": {}, "queue": {"count": "1", "ns": "56416"}, '
    '"compute_input": {"count": "1", "ns": "28423"}, "compute_infer": {"count": "1", "ns": '
    '"54418005"}, "compute_output": {"count": "1", "ns": "134783"}, "cache_hit": {}, '
    '"cache_miss": {"count": "1", "ns": "50646"}}, "batch_stats": [{"batch_size": "1", '
    '"compute_input": {"count": "1", "ns": "28423"}, "compute_infer": {"count": "1", "ns": '
    '"54418005"}, "compute_output": {"count": "1", "ns": "134783"}}]}]}'
)
READ_2 = json.loads(
    '{"model_stats":[{"name":"cached","version":"1","last_inference":1796521534160,'
    '"inference_count":2,"execution_count":2,"inference_stats":{"success":{"count":4,'
    '"ns":70860054},"fail":{"count":0,"ns":0},"queue":{"count":4,"ns":109324},'
    '"compute_input":{"count":2,"ns":77365},"compute_infer":{"count":2,"ns":70250650},'
    '"compute_output":{"count":2,"ns":299302},"cache_hit":{"count":2,"ns":29256},'
    '"cache_miss":{"count":2,"ns":82475}},"response_stats":{},"batch_stats":[{"batch_size":1,'
    '"compute_input":{"count":2,"ns":77365},"compute_infer":{"count":2,"ns":70250650},'
    '"compute_output":{"count":2,"ns":299302}}],"memory_usage":[]}]}'
)
READ_2_GRPC = json.loads(
    '{"model_stats": [{"name": "cached", "version": "1", "last_inference": "1796521534160", '
    '"inference_count": "2", "execution_count": "2", "inference_stats": {"success": {"count": '
    '"4", "ns": "70860054"}, "fail": {}, "queue": {"count": "4", "ns": "109324"}, '
    '"compute_input": {"count": "2", "ns": "77365"}, "compute_infer": {"count": "2", "ns": '
    '"70250650"}, "compute_output": {"count": "2", "ns": "299302"}, "cache_hit": {"count": '
    '"2", "ns": "29256"}, "cache_miss": {"count": "2", "ns": "82475"}}, "batch_stats": '
    '[{"batch_size": "1", "compute_input": {"count": "2", "ns": "77365"}, "compute_infer": '
    '{"count": "2", "ns": "70250650"}, "compute_output": {"count": "2", "ns": "299302"}}]}]}'
)
PREP = json.loads(
    '{"name":"prep","version":"1","last_inference":1796521534077,"inference_count":1,'
    '"execution_count":1,"inference_stats":{"success":{"count":1,"ns":41037929},'
    '"fail":{"count":0,"ns":0},"queue":{"count":1,"ns":117801},"compute_input":{"count":1,'
    '"ns":212108},"compute_infer":{"count":1,"ns":40598526},"compute_output":{"count":1,'
    '"ns":103544},"cache_hit":{"count":0,"ns":0},"cache_miss":{"count":0,"ns":0}},'
    '"response_stats":{},"batch_stats":[{"batch_size":1,"compute_input":{"count":1,'
    '"ns":212108},"compute_infer":{"count":1,"ns":40598526},"compute_output":{"count":1,'
    '"ns":103544}}],"memory_usage":[]}'
)
"""``prep``'s entry in the all-models answer (``GET /v2/models/stats``) after READ_2: a
model without a response cache, printed with ``cache_hit``/``cache_miss`` {0, 0}."""

WINDOW = 10.0
EXPECTED = CacheRates(
    hits_per_second=2 / WINDOW,
    misses_per_second=1 / WINDOW,
    hit_ratio=2 / 3,
    hit_seconds_average=29256e-9 / 2,  # 14.6 µs per hit
    miss_seconds_average=(82475 - 50646) * 1e-9,  # one miss: 31.8 µs
)
"""READ_1 → READ_2 over a 10 s window: 2 hits, 1 miss."""


def _all_models(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"model_stats": list(entries)}


def _read(document: Any, at: float, model: str = "cached") -> ModelStatistics:
    return parse_model_statistics(document, model, "", at)


def _approx(cache: CacheRates) -> Any:
    return pytest.approx(
        (
            cache.hits_per_second,
            cache.misses_per_second,
            cache.hit_ratio,
            cache.hit_seconds_average,
            cache.miss_seconds_average,
        ),
        rel=1e-12,
    )


def _tuple(cache: CacheRates | None) -> tuple[float | None, ...]:
    assert cache is not None
    return (
        cache.hits_per_second,
        cache.misses_per_second,
        cache.hit_ratio,
        cache.hit_seconds_average,
        cache.miss_seconds_average,
    )


# -- reading ------------------------------------------------------------------------------


@pytest.mark.parametrize("document", [READ_2, READ_2_GRPC], ids=["http", "grpc-strings"])
def test_cache_hit_and_miss_are_read_as_numbers_or_strings(document: Any) -> None:
    stats = _read(document, 0.0)
    assert (stats.cache_hits, stats.cache_hit_ns, stats.cache_misses, stats.cache_miss_ns) == (
        2,
        29256,
        2,
        82475,
    )


def test_grpc_leaves_a_zero_hit_out_and_it_reads_as_zero() -> None:
    """tritonclient's printer drops a field at its default: ``"cache_hit": {}``."""
    assert _read(READ_1_GRPC, 0.0) == _read(READ_1, 0.0)
    stats = _read(READ_1_GRPC, 0.0)
    assert (stats.cache_hits, stats.cache_hit_ns, stats.cache_misses) == (0, 0, 1)


def test_the_all_models_answer_gives_each_model_its_own_counts() -> None:
    keys = [ModelKey("cached", ""), ModelKey("prep", "1")]
    parsed, malformed = parse_all_model_statistics(
        _all_models(*READ_2["model_stats"], PREP), keys, 0.0
    )
    assert not malformed
    assert parsed["cached"] == _read(READ_2, 0.0)
    prep = parsed["prep"]
    assert (prep.cache_hits, prep.cache_hit_ns, prep.cache_misses, prep.cache_miss_ns) == (0,) * 4


def test_versions_are_summed() -> None:
    one = json.loads(json.dumps(READ_2["model_stats"][0]))
    two = {**json.loads(json.dumps(one)), "version": "2"}
    both = _read(_all_models(one, two), 0.0)
    assert (both.cache_hits, both.cache_hit_ns, both.cache_misses, both.cache_miss_ns) == (
        4,
        58512,
        4,
        164950,
    )
    only_two = parse_model_statistics(_all_models(one, two), "cached", "2", 0.0)
    assert only_two.cache_misses == 2


@pytest.mark.parametrize(
    ("stat", "value", "field"),
    [
        ("cache_hit", {"count": -1, "ns": 0}, "cache_hit.count"),
        ("cache_miss", {"count": 1, "ns": "12.5"}, "cache_miss.ns"),
        ("cache_hit", [1, 2], "cache_hit"),
    ],
)
def test_a_malformed_cache_stat_names_its_field(stat: str, value: Any, field: str) -> None:
    document = json.loads(json.dumps(READ_2))
    document["model_stats"][0]["inference_stats"][stat] = value
    with pytest.raises(ValueError, match=rf"model_stats\[0\]\.inference_stats\.{field}"):
        _read(document, 0.0)


# -- rates --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after"),
    [(READ_1, READ_2), (READ_1_GRPC, READ_2_GRPC), (READ_1, READ_2_GRPC)],
    ids=["http", "grpc", "mixed"],
)
def test_hits_misses_and_mean_times_between_two_reads(before: Any, after: Any) -> None:
    rates_ = batch_statistics_rates(_read(before, 0.0), _read(after, WINDOW))
    assert not rates_.counters_reset
    assert _tuple(rates_.cache) == _approx(EXPECTED)


def test_a_reload_restarts_the_counts_and_the_increases_start_from_zero() -> None:
    """READ_2 then READ_1: every cache count went down (the model was replaced), so the
    window has READ_1's own counts, one miss of 50.6 µs: a 0 % hit ratio, not a
    negative one."""
    rates_ = batch_statistics_rates(_read(READ_2, 0.0), _read(READ_1, WINDOW))
    assert rates_.counters_reset
    assert _tuple(rates_.cache) == pytest.approx((0.0, 0.1, 0.0, None, 50646e-9), rel=1e-12)


def test_only_the_cache_going_down_is_a_reset_too() -> None:
    """The other counts equal, one cache count lower: the statistics restarted."""
    after = json.loads(json.dumps(READ_2))
    after["model_stats"][0]["inference_stats"]["cache_hit"] = {"count": 1, "ns": 30000}
    rates_ = batch_statistics_rates(_read(READ_2, 0.0), _read(after, WINDOW))
    assert rates_.counters_reset
    assert rates_.cache is not None and rates_.cache.hits_per_second == pytest.approx(0.1)


def test_zeros_alone_say_nothing_about_a_cache() -> None:
    """Triton prints cache_hit/cache_miss {0, 0} for a model without a cache (``prep``):
    no cache readings, unless its config enables the cache (then: no lookups)."""
    earlier, later = _read(_all_models(PREP), 0.0, "prep"), _read(_all_models(PREP), WINDOW, "prep")
    assert batch_statistics_rates(earlier, later).cache is None
    enabled = batch_statistics_rates(earlier, later, response_cache=True).cache
    assert enabled == CacheRates(0.0, 0.0, None, None, None)


def test_a_counted_lookup_is_a_cache_whatever_the_config_says() -> None:
    """Without the config (API off), a model whose statistics counted a lookup since it
    was loaded has cache readings, also over a window without lookups."""
    idle = batch_statistics_rates(_read(READ_2, 0.0), _read(READ_2, WINDOW))
    assert idle.cache == CacheRates(0.0, 0.0, None, None, None)


# -- which source ------------------------------------------------------------------------


def test_metrics_wins_when_both_sources_have_the_cache() -> None:
    metrics = CacheRates(9.0, 1.0, 0.9, 9e-6, 50e-6)
    stats = batch_statistics_rates(_read(READ_1, 0.0), _read(READ_2, WINDOW))
    both = ModelState("cached", rates=rates("cached", 0.3, cache=metrics), batches=stats)
    assert both.cache is metrics
    page_without = ModelState("cached", rates=rates("cached", 0.3), batches=stats)
    assert page_without.cache is stats.cache
    no_page = ModelState("cached", batches=stats)  # /metrics off: no rates at all
    assert no_page.cache is stats.cache
    assert ModelState("cached", rates=rates("cached", 0.3)).cache is None


# -- the scraper --------------------------------------------------------------------------


def _page_at(cycle: int, cache_families: bool) -> bytes:
    """The /metrics page at a cycle (10 s apart): both models' request counters, and the
    per-model cache families (90 hits and 10 misses a window) only when asked."""
    lines = []
    for model in ("cached", "prep"):
        labels = f'{{model="{model}",version="1"}}'
        lines += [
            f"nv_inference_request_success{labels} {100 * cycle}",
            f"nv_inference_count{labels} {100 * cycle}",
            f"nv_inference_exec_count{labels} {100 * cycle}",
            f"nv_inference_request_duration_us{labels} {30000 * cycle}",
        ]
    if cache_families:
        labels = '{model="cached",version="1"}'
        lines += [
            f"nv_cache_num_hits_per_model{labels} {90 * cycle}",
            f"nv_cache_num_misses_per_model{labels} {10 * cycle}",
            f"nv_cache_hit_duration_per_model{labels} {810 * cycle}",
            f"nv_cache_miss_duration_per_model{labels} {500 * cycle}",
        ]
    return ("\n".join(lines) + "\n").encode()


def _scraper(stub: StubServer, clock: FakeClock, *, configs: bool) -> TargetScraper:
    if configs:  # else the config API answers a bare 404: off, the traits unknown
        cached = {**python_config("cached"), "response_cache": {"enable": True}}
        for name, config in (("cached", cached), ("prep", python_config("prep"))):
            stub.routes[f"/v2/models/{name}/config"] = Route(body=json.dumps(config).encode())
    target = TargetConfig.model_validate(
        {
            "name": "t",
            "url": stub.url,
            "metrics_url": f"{stub.url}/metrics",
            "models": [{"name": "cached"}, {"name": "prep"}],
        }
    )
    return TargetScraper(target, 2.0, clock)


def _two_cycles(stub: StubServer, *, cache_families: bool, configs: bool = False) -> TargetState:
    clock = FakeClock()
    scraper = _scraper(stub, clock, configs=configs)
    for cycle, read in enumerate((READ_1, READ_2), start=1):
        stub.routes["/metrics"] = Route(body=_page_at(cycle, cache_families))
        answer = _all_models(*read["model_stats"], PREP)
        stub.routes["/v2/models/stats"] = Route(body=json.dumps(answer).encode())
        assert scraper.scrape_once().ok
        clock.advance(WINDOW)
    return scraper.state()


def _exported(state: TargetState) -> dict[tuple[str, str], float]:
    registry = CollectorRegistry()
    registry.register(TritonModelCollector(lambda: [state]))
    return {
        (sample.name, sample.labels["model"]): sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
        if sample.name.startswith("tritonwatch_model_cache_")
    }


@pytest.mark.parametrize("configs", [False, True], ids=["no-config-api", "config-api"])
def test_a_page_without_cache_families_gets_the_ratio_from_the_statistics(
    stub: StubServer, configs: bool
) -> None:
    """Breaks if the statistics' cache_hit/cache_miss are not used where /metrics lacks
    the families, or if a model without a cache (prep: zeros) gets readings."""
    state = _two_cycles(stub, cache_families=False, configs=configs)
    cached, prep = state.models["cached"], state.models["prep"]
    assert cached.rates is not None and cached.rates.cache is None  # the page had none
    assert (cached.config is not None and cached.config.traits.response_cache) == configs
    assert _tuple(cached.cache) == _approx(EXPECTED)
    assert prep.rates is not None and prep.cache is None
    assert _exported(state) == pytest.approx(
        {
            ("tritonwatch_model_cache_hit_ratio", "cached"): 2 / 3,
            ("tritonwatch_model_cache_hit_seconds", "cached"): 29256e-9 / 2,
            ("tritonwatch_model_cache_miss_seconds", "cached"): 31829e-9,
        },
        rel=1e-9,
    )
    assert cache_line(cached) == "response cache: 67% hits · hit 0.01 ms · miss 0.03 ms"
    assert cache_line(prep) is None


def test_the_page_wins_when_it_has_the_families(stub: StubServer) -> None:
    """Both sources: the exported readings are /metrics' (90 % hits, 9 µs, 50 µs), not
    the statistics' (67 %)."""
    state = _two_cycles(stub, cache_families=True)
    cached = state.models["cached"]
    assert cached.batches is not None and cached.batches.cache is not None  # read, unused
    assert _exported(state) == pytest.approx(
        {
            ("tritonwatch_model_cache_hit_ratio", "cached"): 0.9,
            ("tritonwatch_model_cache_hit_seconds", "cached"): 9e-6,
            ("tritonwatch_model_cache_miss_seconds", "cached"): 50e-6,
        },
        rel=1e-9,
    )
