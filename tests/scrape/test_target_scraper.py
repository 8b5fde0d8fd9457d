"""TargetScraper against the simulator: rates, statistics, config changes and every failure."""

from __future__ import annotations

import json
from collections.abc import MutableMapping, Sequence
from typing import Any

import pytest
from sim_traffic import FakeClock, http_client, infer, sim_target
from structlog.testing import capture_logs

from stub_server import Route, StubServer
from support import fixtures_dir
from tritonwatch.analysis.breakdown import judge_target
from tritonwatch.config.schema import TargetConfig
from tritonwatch.records.observations import ModelKey
from tritonwatch.records.target_state import FetchStatus, ScrapeSource
from tritonwatch.scrape import api_switches
from tritonwatch.scrape.target_scraper import TargetScraper
from tritonwatch.sim.server import Simulator

pytestmark = pytest.mark.sim

SIMPLE = ModelKey("simple", "")


def events(logs: Sequence[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    return [line for line in logs if line["event"] == name]


def test_rates_after_two_scrapes_under_load(sim: Simulator, clock: FakeClock) -> None:
    """Five requests in a 10 s window: 0.5 requests/s, batch 1, a breakdown from the timers."""
    scraper = TargetScraper(sim_target(sim, "simple", "resnet50"), 2.0, clock)
    first = scraper.scrape_once()
    assert first.ok and first.rates is None  # a rate needs two scrapes
    assert {source: o.status for source, o in first.sources.items()} == dict.fromkeys(
        ScrapeSource, FetchStatus.SUCCESS
    )
    infer(sim, "simple", 5)
    clock.advance(10.0)
    second = scraper.scrape_once()
    assert second.rates is not None
    rates = second.rates.models[SIMPLE]
    assert rates.requests_per_second == pytest.approx(0.5)
    assert rates.inferences_per_second == pytest.approx(0.5)
    assert rates.batch_size_average == pytest.approx(1.0)
    assert rates.failures_per_second == 0
    assert set(second.rates.models) == {SIMPLE, ModelKey("resnet50", "")}  # configured only

    state = scraper.state()
    simple = state.models["simple"]
    assert simple.rates == rates
    assert simple.breakdown is None and simple.canary_mean_seconds is None  # readings only
    simple = judge_target(state).models["simple"]
    assert simple.breakdown is not None
    assert simple.breakdown.compute_infer == pytest.approx(
        rates.compute_infer_seconds_average, rel=1e-9
    )
    assert simple.breakdown.network_client is None  # no canary here
    assert simple.config is not None and simple.config.max_batch_size == 8
    idle = judge_target(state).models["resnet50"]
    assert idle.rates is not None and idle.rates.requests_per_second == 0
    assert idle.breakdown is None and idle.bottleneck is None  # no traffic, no finding
    assert len(state.gpus) == 3  # the simulator's GPUs, as Triton reports them
    assert state.server["nv_cpu_memory_total_bytes"] > 0


def test_statistics_give_the_executed_batch_sizes(sim: Simulator, clock: FakeClock) -> None:
    """3 requests of 4 rows and 2 of 1, one at a time: executions/s per size exactly that,
    and the true average (3·4 + 2·1) / 5 = 2.8 agrees with /metrics' Δcount / Δexec."""
    scraper = TargetScraper(sim_target(sim, "simple"), 2.0, clock)
    scraper.scrape_once()
    infer(sim, "simple", 3, batch_size=4)
    infer(sim, "simple", 2, batch_size=1)
    clock.advance(10.0)
    scraper.scrape_once()
    simple = scraper.state().models["simple"]
    assert simple.batches is not None
    assert dict(simple.batches.executions_per_second_by_size) == pytest.approx({1: 0.2, 4: 0.3})
    assert simple.batches.batch_size_average == pytest.approx(2.8)
    assert simple.rates is not None and simple.rates.batch_size_average == pytest.approx(2.8)


def test_bad_lines_are_counted_and_skipped(sim: Simulator, clock: FakeClock) -> None:
    """A malformed line costs one bad line, never the scrape; the count accumulates."""
    sim.inject_fault(kind="malformed_metrics")
    scraper = TargetScraper(sim_target(sim, "simple"), 2.0, clock)
    with capture_logs() as logs:
        first = scraper.scrape_once()
        clock.advance(10.0)
        second = scraper.scrape_once()
    assert first.ok and second.ok
    assert (first.bad_lines, second.bad_lines) == (1, 1)
    assert scraper.state().bad_lines_total == 2
    assert second.rates is not None and SIMPLE in second.rates.models
    assert len(events(logs, "scrape_bad_lines")) == 1  # once, not every scrape


def test_slow_metrics_is_a_timeout_outcome(sim: Simulator) -> None:
    """/metrics answering after 2 s with a 0.2 s timeout: a timeout outcome within the
    cycle's deadline, logged once; the sources left without time time out too."""
    sim.inject_fault(kind="slow_metrics", delay_s=2)
    scraper = TargetScraper(sim_target(sim, "simple"), 0.2)
    with capture_logs() as logs:
        outcome = scraper.scrape_once()
    assert not outcome.ok
    assert {source: o.status for source, o in outcome.sources.items()} == dict.fromkeys(
        ScrapeSource, FetchStatus.TIMEOUT
    )
    assert outcome.sources[ScrapeSource.METRICS].duration_seconds < 1.0
    failed = events(logs, "scrape_failed")
    assert [line["source"] for line in failed] == ["metrics", "stats", "config"]
    assert failed[0]["outcome"] == "timeout"
    assert scraper.state().models["simple"].rates is None

    sim.clear_faults()
    with capture_logs() as logs:
        assert scraper.scrape_once().ok
    assert {line["source"] for line in events(logs, "scrape_recovered")} == {
        "metrics",
        "stats",
        "config",
    }


def test_a_restart_never_gives_negative_rates(sim: Simulator, clock: FakeClock) -> None:
    """Counters back to zero: the increase is taken from zero, as Prometheus' rate() does."""
    scraper = TargetScraper(sim_target(sim, "simple"), 2.0, clock)
    scraper.scrape_once()
    infer(sim, "simple", 5)
    clock.advance(10.0)
    scraper.scrape_once()
    sim.restart()
    infer(sim, "simple", 2)
    clock.advance(10.0)
    with capture_logs() as logs:
        outcome = scraper.scrape_once()
    assert outcome.rates is not None
    rates = outcome.rates.models[SIMPLE]
    assert rates.counters_reset is True
    assert rates.requests_per_second == pytest.approx(0.2)  # the 2 after the restart
    for name in ("requests_per_second", "inferences_per_second", "executions_per_second"):
        assert getattr(rates, name) >= 0
    batches = scraper.state().models["simple"].batches
    assert batches is not None and batches.counters_reset is True
    assert dict(batches.executions_per_second_by_size) == pytest.approx({1: 0.2})
    assert events(logs, "triton_counters_reset")[0]["models"] == ["simple"]


def test_a_config_change_is_logged_and_queued(sim: Simulator, clock: FakeClock) -> None:
    """A new config loaded through the repository API: one model_config_changed line with
    the field old → new, and one change for the consumer to drain."""
    scraper = TargetScraper(sim_target(sim, "simple"), 2.0, clock, config_every=1)
    scraper.scrape_once()
    with http_client(sim) as client:
        config = client.get_model_config("simple")
        config["dynamic_batching"]["max_queue_delay_microseconds"] = 50
        client.load_model("simple", config=json.dumps(config))
    clock.advance(10.0)
    with capture_logs() as logs:
        scraper.scrape_once()
    (logged,) = events(logs, "model_config_changed")
    assert logged["target"] == "sim" and logged["model"] == "simple"
    assert logged["changes"] == {
        "dynamic_batching.max_queue_delay_microseconds": {"old": 100, "new": 50}
    }
    assert scraper.config_changes() == scraper.config_changes()  # peeking keeps them
    (change,) = scraper.drain_config_changes()
    assert change.previous.dynamic_batching is not None
    assert change.previous.dynamic_batching.max_queue_delay_microseconds == 100
    assert change.current.dynamic_batching is not None
    assert change.current.dynamic_batching.max_queue_delay_microseconds == 50
    assert change.at == clock.now
    assert scraper.drain_config_changes() == []
    current = scraper.state().models["simple"].config
    assert current is not None and current.dynamic_batching == change.current.dynamic_batching


def test_a_reload_is_seen_the_next_cycle_without_waiting_for_the_backstop(
    sim: Simulator, clock: FakeClock
) -> None:
    """The backstop far off (once an hour): a reload through the repository API replaces
    the loaded model, its statistics start over, and the next cycle reads the config —
    the change queued, as with a poll every cycle. A cycle with no news reads none."""
    scraper = TargetScraper(sim_target(sim, "simple"), 2.0, clock)
    scraper.scrape_once()
    infer(sim, "simple", 3)
    clock.advance(10.0)
    assert ScrapeSource.CONFIG not in scraper.scrape_once().sources  # nothing due
    with http_client(sim) as client:
        config = client.get_model_config("simple")
        config["dynamic_batching"]["max_queue_delay_microseconds"] = 50
        client.load_model("simple", config=json.dumps(config))
    clock.advance(10.0)
    assert ScrapeSource.CONFIG in scraper.scrape_once().sources
    (change,) = scraper.drain_config_changes()
    assert change.model == "simple"
    assert list(change.changes) == ["dynamic_batching.max_queue_delay_microseconds"]
    assert scraper.take_reloaded() == {"simple"}
    clock.advance(10.0)
    assert ScrapeSource.CONFIG not in scraper.scrape_once().sources


def test_config_is_polled_every_nth_cycle(sim: Simulator, clock: FakeClock) -> None:
    """One model's config is read on the first cycle and every config_every-th after it
    (the backstop's turn: one model is always at position 0)."""
    scraper = TargetScraper(sim_target(sim, "simple"), 2.0, clock, config_every=3)
    polled = [ScrapeSource.CONFIG in scraper.scrape_once().sources for _ in range(7)]
    assert polled == [True, False, False, True, False, False, True]


def test_an_unknown_model_fails_its_requests_but_keeps_the_apis(
    sim: Simulator, clock: FakeClock
) -> None:
    """Triton's {"error": ...} for a model it does not know is a failure, not a missing API."""
    scraper = TargetScraper(sim_target(sim, "simple", "missing"), 2.0, clock)
    with capture_logs() as logs:
        first = scraper.scrape_once()
        second = scraper.scrape_once()
    for outcome in (first, second):
        stats = outcome.sources[ScrapeSource.STATS]
        assert stats.status is FetchStatus.HTTP_ERROR
        assert stats.error.startswith("missing: HTTP 4")
    assert not events(logs, "scrape_feature_unsupported")
    assert scraper.state().models["simple"].config is not None


def test_a_server_without_the_apis_switches_them_off(stub: StubServer) -> None:
    """A bare /metrics server (404 everywhere else): each API is asked once (the
    statistics for all models, then for the first model), switched off with one log
    line, and absent from the scrape health series; /metrics goes on."""
    page = (fixtures_dir() / "triton_metrics" / "sample_04.txt").read_bytes()
    stub.routes["/metrics"] = Route(body=page)
    target = TargetConfig.model_validate(
        {
            "name": "bare",
            "url": stub.url,
            "metrics_url": f"{stub.url}/metrics",
            "models": [{"name": "densenet_onnx"}, {"name": "cc_fraud_detect_model"}],
        }
    )
    scraper = TargetScraper(target, 2.0, FakeClock())
    with capture_logs() as logs:
        outcomes = [scraper.scrape_once() for _ in range(3)]
    assert all(outcome.ok for outcome in outcomes)
    assert [set(outcome.sources) for outcome in outcomes] == [{ScrapeSource.METRICS}] * 3
    off = events(logs, "scrape_feature_unsupported")
    assert [(line["source"], line["http_status"]) for line in off] == [
        ("stats", 404),
        ("config", 404),
    ]
    assert set(scraper.state().sources) == {ScrapeSource.METRICS}
    asked = [path for path in stub.requests if path != "/metrics"]
    assert asked == [
        "/v2/models/stats",
        "/v2/models/densenet_onnx/stats",
        "/v2/models/densenet_onnx/config",
    ]


def test_an_oversized_metrics_page_is_too_large(stub: StubServer) -> None:
    """A /metrics page over max_bytes is a too_large scrape, not read on."""
    stub.routes["/metrics"] = Route(body=b"# padding\n" * 200)
    target = TargetConfig.model_validate(
        {
            "name": "big",
            "url": stub.url,
            "metrics_url": f"{stub.url}/metrics",
            "models": [{"name": "m"}],
        }
    )
    outcome = TargetScraper(target, 2.0, max_bytes=1000).scrape_once()
    assert outcome.sources[ScrapeSource.METRICS].status is FetchStatus.TOO_LARGE


def test_a_switched_off_api_is_asked_again_later(
    stub: StubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server upgraded to one with the statistics API is noticed at the next re-check."""
    monkeypatch.setattr(api_switches, "UNSUPPORTED_RECHECK_CYCLES", 2)
    stub.routes["/metrics"] = Route(body=b"")
    target = TargetConfig.model_validate(
        {
            "name": "t",
            "url": stub.url,
            "metrics_url": f"{stub.url}/metrics",
            "models": [{"name": "m"}],
        }
    )
    scraper = TargetScraper(target, 2.0, FakeClock(), config_every=1000)
    with capture_logs() as logs:
        assert ScrapeSource.STATS not in scraper.scrape_once().sources  # off
        assert ScrapeSource.STATS not in scraper.scrape_once().sources  # not asked
        stub.routes["/v2/models/m/stats"] = Route(
            body=b'{"model_stats": [{"name": "m", "version": "1", "batch_stats": []}]}'
        )
        assert scraper.scrape_once().sources[ScrapeSource.STATS].ok  # asked again: back on
    assert [line["event"] for line in logs if "feature" in str(line["event"])] == [
        "scrape_feature_unsupported",
        "scrape_feature_unsupported",
        "scrape_feature_available",
    ]
    assert [line["source"] for line in logs if "feature" in str(line["event"])] == [
        "stats",
        "config",
        "stats",
    ]
