"""TritonScrapers follows the config: keeps unchanged targets, rebuilds changed, closes removed."""

from __future__ import annotations

from typing import Any

import pytest

from tritonwatch.config.schema import Config, TargetConfig
from tritonwatch.records.observations import (
    CanaryResult,
    ModelConfigChange,
    ModelConfigSnapshot,
    Outcome,
    TritonGpuRates,
)
from tritonwatch.records.target_state import ScrapeOutcome, TargetState
from tritonwatch.scrape.triton_scrapers import TritonScrapers, canary_totals
from tritonwatch.state.canary_board import CanaryBoard


class FakeScraper:
    """Records how it was built; answers with canned state."""

    def __init__(self, target: TargetConfig, timeout: float, clock: Any, **options: Any) -> None:
        self.target, self.timeout, self.options = target, timeout, options
        self.closed = False
        self.cycles = 0
        self.changes: list[ModelConfigChange] = []
        self.gpus: dict[str, TritonGpuRates] = {}
        self.marked: list[str] = []
        self.reloaded: set[str] = set()

    def scrape_once(self) -> ScrapeOutcome:
        self.cycles += 1
        return ScrapeOutcome(self.target.name, 0.0, {}, 0, None)

    def state(self) -> TargetState:
        return TargetState(self.target.name, {}, 0, {}, self.gpus, {})

    def drain_config_changes(self) -> list[ModelConfigChange]:
        changes, self.changes = self.changes, []
        return changes

    def mark_config_due(self, model: str) -> None:
        self.marked.append(model)

    def take_reloaded(self) -> set[str]:
        reloaded, self.reloaded = self.reloaded, set()
        return reloaded

    def close(self) -> None:
        self.closed = True


def config(**targets: str) -> Config:
    """Targets by name → URL, each watching one model, with an SLO per model."""
    return Config.model_validate(
        {
            "targets": [
                {
                    "name": name,
                    "url": url,
                    "models": [{"name": "m", "slo": {"latency": {"threshold": "100ms"}}}],
                }
                for name, url in targets.items()
            ],
            "scrape": {"interval": "15s", "timeout": "5s"},
        }
    )


MADE: list[FakeScraper] = []


def factory(*args: Any, **options: Any) -> FakeScraper:
    scraper = FakeScraper(*args, **options)
    MADE.append(scraper)
    return scraper


@pytest.fixture
def scrapers() -> TritonScrapers:
    MADE.clear()
    return TritonScrapers(scraper_factory=factory, config_every=2)


def built(scrapers: TritonScrapers) -> dict[str, FakeScraper]:
    """The scrapers in use: the open one built last for each target."""
    return {scraper.target.name: scraper for scraper in MADE if not scraper.closed}


def test_one_scraper_per_target(scrapers: TritonScrapers) -> None:
    """One scraper per target with the scrape timeout and config cadence, and no verdicts."""
    scrapers.apply(config(a="http://a:8000", b="grpc://b:8001"))
    made = built(scrapers)
    assert sorted(made) == ["a", "b"]
    assert made["a"].timeout == 5.0
    assert made["a"].options["config_every"] == 2
    assert "thresholds" not in made["a"].options  # verdicts are the wiring's, not the scrape's
    outcome = scrapers.scrape("a")
    assert outcome is not None and outcome.target == "a"
    assert scrapers.scrape("gone") is None
    assert [state.target for state in scrapers.states()] == ["a", "b"]


def test_a_reload_keeps_unchanged_targets_and_rebuilds_changed_ones(
    scrapers: TritonScrapers,
) -> None:
    """A reload keeps unchanged targets' scrapers, rebuilds changed ones and closes removed."""
    scrapers.apply(config(a="http://a:8000", b="http://b:8000", c="http://c:8000"))
    before = built(scrapers)
    scrapers.apply(config(a="http://a:8000", b="http://b2:8000"))
    after = built(scrapers)
    assert after["a"] is before["a"] and not before["a"].closed  # rates continue
    assert after["b"] is not before["b"] and before["b"].closed
    assert before["c"].closed and "c" not in after
    scrapers.close()
    assert not built(scrapers)
    assert scrapers.states() == []


def test_config_changes_of_every_target_drain_in_time_order(scrapers: TritonScrapers) -> None:
    """Config changes of all targets drain once, in the order they happened."""
    scrapers.apply(config(a="http://a:8000", b="http://b:8000"))
    snapshot = ModelConfigSnapshot("m", 0.0, 8, None, (), {})
    made = built(scrapers)
    made["a"].changes = [ModelConfigChange("a", "m", 20.0, snapshot, snapshot, {})]
    made["b"].changes = [ModelConfigChange("b", "m", 10.0, snapshot, snapshot, {})]
    assert [change.target for change in scrapers.drain_config_changes()] == ["b", "a"]
    assert scrapers.drain_config_changes() == []


def test_triton_gpus_merge_across_targets(scrapers: TritonScrapers) -> None:
    """Two servers on one host report the same GPU once."""
    scrapers.apply(config(a="http://a:8000", b="http://b:8000"))
    gpu = TritonGpuRates("GPU-1", 15.0, 0.5, 1.0, 2.0, 100.0, 300.0, 10.0, 95.0)
    made = built(scrapers)
    made["a"].gpus = {"GPU-1": gpu}
    made["b"].gpus = {"GPU-1": gpu, "GPU-2": gpu}
    assert sorted(scrapers.triton_gpus()) == ["GPU-1", "GPU-2"]


def test_canary_totals_sum_protocols_per_model() -> None:
    """Canary latency totals add a model's protocols together; a quiet model gives zeros."""
    stats = CanaryBoard()
    stats.declare([("t", "m", "http"), ("t", "m", "grpc"), ("t", "other", "http")])
    for protocol, latency in (("http", 0.010), ("grpc", 0.030), ("http", 0.020)):
        stats.record(CanaryResult("t", "m", protocol, 1.0, Outcome.SUCCESS, latency))
    totals = canary_totals(stats, clock=lambda: 2.0)()
    seconds, count = totals[("t", "m")]
    assert seconds == pytest.approx(0.060)
    assert count == 3
    assert totals[("t", "other")] == (0.0, 0)


def test_the_config_backstop_is_the_refresh_interval_in_cycles_and_rebuilds_when_it_moves() -> None:
    """No fixed cadence given: ``scrape.config_refresh_interval`` over ``scrape.interval``
    (1 h / 15 s = 240 cycles by default); a new interval rebuilds the target's scraper."""
    MADE.clear()
    scrapers = TritonScrapers(scraper_factory=factory)
    scrapers.apply(config(a="http://a:8000"))
    assert built(scrapers)["a"].options["config_every"] == 240
    faster = config(a="http://a:8000").model_copy(
        update={
            "scrape": Config.model_validate({"scrape": {"config_refresh_interval": "10m"}}).scrape
        }
    )
    scrapers.apply(faster)
    assert built(scrapers)["a"].options["config_every"] == 40
    assert len(MADE) == 2


def test_marks_and_reloads_pass_through_to_the_targets_scraper(scrapers: TritonScrapers) -> None:
    """A mark reaches the named target's scraper (none for an unknown target); the models
    the scrapers saw reloaded come back once, by target."""
    scrapers.apply(config(a="http://a:8000", b="http://b:8000"))
    made = built(scrapers)
    scrapers.mark_config_due("a", "m")
    scrapers.mark_config_due("gone", "m")
    assert (made["a"].marked, made["b"].marked) == (["m"], [])
    made["b"].reloaded = {"m", "n"}
    assert scrapers.take_reloaded() == {("b", "m"), ("b", "n")}
    assert scrapers.take_reloaded() == set()
