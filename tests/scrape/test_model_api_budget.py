"""The daemon asks a server's model APIs once (issue 39): counted on the scale
benchmark's many-model server, in this process, with a fake clock.

In the steady state a target costs one statistics request a scrape cycle, one index
request a discovery read, and a model's config only when it is first seen, when the
statistics or ``/metrics`` show it loaded again (another version, back after an
absence, counters started over), when someone marks it due, and otherwise once per
backstop period, spread evenly over the cycles. Discovery reads a model's metadata and
config only when it is new, its index row changed, or it is handed over as reloaded or
newly refused. The canaries of a target share one ``GET /v2``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from sim_traffic import FakeClock

from many_models_support import Answer, ChangingModels, serving
from tritonwatch.config.loader import parse_config
from tritonwatch.config.schema import TargetConfig
from tritonwatch.kserve.server_errors import ServerError
from tritonwatch.probe.canary.model_api import CanaryModelApi
from tritonwatch.runtime.model_discovery import ModelDiscovery
from tritonwatch.scrape.target_scraper import DEFAULT_CONFIG_EVERY, TargetScraper
from tritonwatch.triton_api.endpoint import api_endpoint

INTERVAL = 15.0
"""The default scrape interval: four cycles a minute."""


@pytest.fixture
def many(tmp_path: Path) -> Iterator[tuple[ChangingModels, str, str]]:
    """200 models served: (the server, its API URL, its /metrics URL)."""
    models = ChangingModels(200)
    with serving(models, tmp_path) as ports:
        yield models, f"http://127.0.0.1:{ports['http']}", f"http://127.0.0.1:{ports['metrics']}"


def _target(url: str, metrics: str, names: list[str]) -> TargetConfig:
    return TargetConfig.model_validate(
        {
            "name": "t",
            "url": url,
            "metrics_url": f"{metrics}/metrics",
            "models": [{"name": name} for name in names],
        }
    )


def _cycles(scraper: TargetScraper, clock: FakeClock, models: ChangingModels, n: int) -> list[int]:
    """Runs ``n`` cycles, each ``INTERVAL`` after the last; the config calls of each."""
    made = []
    for _ in range(n):
        clock.advance(INTERVAL)
        before = models.calls["config"]
        outcome = scraper.scrape_once()
        assert outcome.ok, outcome
        made.append(models.calls["config"] - before)
    return made


def test_1000_models_cost_under_30_calls_a_minute(tmp_path: Path) -> None:
    """At the defaults (15 s cycles, configs re-read once an hour), a minute of scraping
    and one discovery read of 1 000 models: 4 statistics requests, 1 index request, no
    metadata, and 4 or 5 configs a cycle (1 000 over 240 cycles) — 25 calls at most,
    under the budget of 30, where re-reading everything every minute cost 3 005."""
    models = ChangingModels(1000)
    with serving(models, tmp_path) as ports:
        url, metrics = f"http://127.0.0.1:{ports['http']}", f"http://127.0.0.1:{ports['metrics']}"
        clock = FakeClock()
        scraper = TargetScraper(_target(url, metrics, models.names), 10.0, clock)
        config = parse_config(
            f"targets:\n  - name: t\n    url: {url}\ndiscovery: {{max_models_per_target: 1000}}\n",
            "c.yaml",
        )
        discovery = ModelDiscovery(timeout=10.0)
        try:
            assert scraper.scrape_once().ok  # the start: every config once
            discovery.commit(discovery.read(config))  # the start: every model described
            assert models.calls["config"] == 2000 and models.calls["metadata"] == 1000
            _cycles(scraper, clock, models, 3)
            models.reset_calls()
            per_cycle = _cycles(scraper, clock, models, 4)  # a minute
            discovery.commit(discovery.read(config))
        finally:
            scraper.close()
    assert DEFAULT_CONFIG_EVERY == 240  # once an hour at 15 s
    assert all(4 <= n <= 5 for n in per_cycle), per_cycle
    counted = {kind: n for kind, n in models.calls.items() if n and kind != "metrics"}
    assert counted == {"stats": 4, "index": 1, "config": sum(per_cycle)}
    assert sum(counted.values()) <= 25


def test_the_backstop_reads_every_config_once_a_period_evenly(
    many: tuple[ChangingModels, str, str],
) -> None:
    """200 models, a 20-cycle backstop: after the first cycle (every config once) each
    period reads every model exactly once, 10 a cycle; nothing else is asked."""
    models, url, metrics = many
    clock = FakeClock()
    scraper = TargetScraper(_target(url, metrics, models.names), 5.0, clock, config_every=20)
    try:
        scraper.scrape_once()
        assert models.calls_of("config") == dict.fromkeys(models.names, 1)
        models.reset_calls()
        first = _cycles(scraper, clock, models, 20)
        assert models.calls_of("config") == dict.fromkeys(models.names, 1)
        second = _cycles(scraper, clock, models, 20)
        assert models.calls_of("config") == dict.fromkeys(models.names, 2)
    finally:
        scraper.close()
    assert first == second == [10] * 20
    assert models.calls["stats"] == 40 and models.calls["metadata"] == 0


def test_each_sign_of_a_reload_reads_that_models_config_once(
    many: tuple[ChangingModels, str, str],
) -> None:
    """With the backstop out of the way (it reads the model at position ``cycle - 1``,
    far from these): a new version, the counters started over, a model back after a
    cycle missing from the statistics, and a mark each read exactly that model's
    config, once, in the next cycle; those seen loaded again are handed to discovery
    once; models with no news cost nothing."""
    models, url, metrics = many
    clock = FakeClock()
    scraper = TargetScraper(_target(url, metrics, models.names), 5.0, clock, config_every=1000)
    version, reset, back, marked = models.names[150:154]

    def read() -> dict[str, int]:
        """The config calls of the models past the backstop's first 100 turns."""
        return {m: n for m, n in models.calls_of("config").items() if m >= "m0100"}

    try:
        models.serve_some(reset)
        scraper.scrape_once()
        _cycles(scraper, clock, models, 1)
        models.reset_calls()

        models.versions[version] = "2"
        models.reload(reset)
        models.hidden.add(back)
        _cycles(scraper, clock, models, 1)
        assert read() == {version: 1, reset: 1}
        assert scraper.take_reloaded() == {version, reset}
        assert scraper.take_reloaded() == set()

        models.hidden.clear()
        _cycles(scraper, clock, models, 1)
        assert read() == {version: 1, reset: 1, back: 1}
        scraper.mark_config_due(marked)
        _cycles(scraper, clock, models, 1)
        assert read() == {version: 1, reset: 1, back: 1, marked: 1}
        _cycles(scraper, clock, models, 3)
    finally:
        scraper.close()
    assert read() == {version: 1, reset: 1, back: 1, marked: 1}
    assert scraper.take_reloaded() == {back}
    assert models.calls["metadata"] == 0


def test_discovery_reads_the_index_once_and_describes_only_what_changed(
    many: tuple[ChangingModels, str, str],
) -> None:
    """200 models: the first read describes each (metadata and config once); a read of
    an unchanged server is one index request; a new version, a model handed over as
    reloaded, and one whose canary became refused are described once each — a model
    still refused at the next read is not described again."""
    models, url, _ = many
    config = parse_config(
        f"targets:\n  - name: t\n    url: {url}\ndiscovery: {{max_models_per_target: 1000}}\n",
        "c.yaml",
    )
    discovery = ModelDiscovery()
    first = discovery.read(config)
    discovery.commit(first)
    assert models.calls_of("metadata") == dict.fromkeys(models.names, 1)
    assert models.calls_of("config") == dict.fromkeys(models.names, 1)
    assert [model.name for model in first["t"]] == models.names

    models.reset_calls()
    assert discovery.read(config) == first
    assert models.calls["index"] == 1 and models.calls_of("metadata") == {}

    version, reloaded, refused = "m0017", "m0018", "m0019"
    models.versions[version] = "2"
    found = discovery.read(config, reloaded={("t", reloaded)}, refused={("t", refused)})
    discovery.commit(found)
    described = {version: 1, reloaded: 1, refused: 1}
    assert models.calls_of("metadata") == models.calls_of("config") == described
    assert found == first  # the same inputs: no canary restarts

    discovery.commit(discovery.read(config, refused={("t", refused)}))
    assert models.calls_of("metadata") == described
    assert models.calls["index"] == 3


def test_a_targets_canaries_share_one_server_metadata_request(
    many: tuple[ChangingModels, str, str],
) -> None:
    """200 canaries asking the extensions at once make one ``GET /v2``; a failure is
    every waiter's, and the next ask after it asks again."""
    models, url, _ = many
    api = CanaryModelApi(api_endpoint(url, ""))

    async def ask_all() -> list[object]:
        return await asyncio.gather(*(api.extensions() for _ in range(200)), return_exceptions=True)

    try:
        models.server_answer = Answer(500, b'{"error":"starting"}')
        failed = asyncio.run(ask_all())
        assert models.calls["server"] == 1
        assert all(isinstance(answer, ServerError) for answer in failed)
        models.server_answer = None
        answers = asyncio.run(ask_all())
        assert models.calls["server"] == 2
        assert set(answers) == {answers[0]}
        assert isinstance(answers[0], frozenset) and "binary_tensor_data" in answers[0]
        assert asyncio.run(api.extensions()) == answers[0]
        assert models.calls["server"] == 2
    finally:
        api.close()
