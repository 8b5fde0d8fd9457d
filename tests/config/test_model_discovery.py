"""Model discovery: index rows, include/exclude, the merge; and against the simulator
(a real HTTP server with Triton's repository API) the cap, reload signatures and
fleet sharding."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from support import http_get, wait_until
from tritonwatch.config import load_config, parse_config
from tritonwatch.config.schema import ModelSelection, TargetConfig, WatchedModel
from tritonwatch.runtime import model_discovery
from tritonwatch.runtime.daemon import Daemon
from tritonwatch.runtime.fleet import Shard
from tritonwatch.runtime.model_discovery import (
    FoundModel,
    ModelDiscovery,
    client_for,
    discover,
    parse_index,
    ready_names,
    select_names,
    with_discovered_models,
)
from tritonwatch.sim.server import Simulator
from tritonwatch.triton_api.client import ModelApiClient

pytestmark = pytest.mark.sim

SIM_MODELS = ("resnet50", "simple", "text_identity")
"""The simulator's built-in models, sorted."""


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator() as simulator:
        yield simulator


def _sim_call(sim: Simulator, path: str, body: object) -> None:
    answer = requests.post(f"{sim.http_url}{path}", json=body, timeout=5)
    assert answer.status_code == 200, answer.text


def _load(sim: Simulator, model: str, config: dict[str, Any]) -> None:
    """Reloads ``model`` with ``config`` (Triton's load-with-config API)."""
    body = {"parameters": {"config": json.dumps(config)}}
    _sim_call(sim, f"/v2/repository/models/{model}/load", body)


INDEX = [
    {"name": "bert", "version": "1", "state": "READY", "reason": ""},
    {"name": "bert", "version": "2", "state": "READY", "reason": ""},
    {"name": "resnet", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
    {"name": "bert_test", "version": "1", "state": "READY"},
    {"name": "gpt", "state": "LOADING"},
]


def test_only_ready_models_each_once_sorted() -> None:
    """An unloaded or loading model must not be watched; versions collapse to the name."""
    assert ready_names(parse_index(INDEX)) == ["bert", "bert_test"]
    assert parse_index([{"version": "1"}, "junk"]) == []  # rows without a name


def test_include_and_exclude_filter_by_search() -> None:
    """``include`` and ``exclude`` are regular expressions searched in the name."""
    selection = ModelSelection(include="^bert", exclude="_test$")
    names = ["bert", "bert_test", "gpt", "my_bert"]
    assert select_names(selection, names) == ["bert"]
    assert select_names(ModelSelection(), names) == sorted(names)


def test_cap_keeps_the_first_by_name_and_is_logged_once_while_reached(sim: Simulator) -> None:
    """Breaks if the cap lets more through, is not logged when reached, is logged again on
    every read while it stays reached, or is not logged when reached a second time."""
    config = parse_config(
        f"targets: [{{name: t, url: '{sim.http_url}'}}]\ndiscovery: {{max_models_per_target: 2}}\n",
        "c.yaml",
    )
    discovery = ModelDiscovery(timeout=5.0)

    def reads(count: int) -> list[dict[str, Any]]:
        with capture_logs() as logs:
            for _ in range(count):
                discovery.refresh(config)
                assert [m.name for m in discovery.found["t"]] == ["resnet50", "simple"]
        return [log for log in logs if log["event"] == "model_discovery_cap_reached"]

    (log,) = reads(3)
    assert (log["target"], log["found"], log["cap"], log["left_out"]) == (
        "t",
        3,
        2,
        ["text_identity"],
    )
    _sim_call(sim, "/v2/repository/models/text_identity/unload", {})
    assert reads(1) == []  # two models, the cap not reached: the next time is news again
    _sim_call(sim, "/v2/repository/models/text_identity/load", {})
    assert [log["found"] for log in reads(2)] == [3]


def test_the_signature_follows_what_the_canary_sends_and_nothing_else(sim: Simulator) -> None:
    """A reload with other input dims must change the signature (the canary is rebuilt);
    one with other instance counts only (what tune does) must not restart the canary."""
    target = TargetConfig.model_validate({"name": "t", "url": sim.http_url})
    client = client_for(target, timeout=5.0)

    def simple() -> str:
        read = discover(target, client, cap=10, known={})
        (found,) = [model for model in read.models if model.name == "simple"]
        return found.signature

    try:
        before = simple()
        config = client.model_config("simple").document_or_raise()
        config["instance_group"][0]["count"] = 3
        _load(sim, "simple", config)
        assert client.model_config("simple").document["instance_group"][0]["count"] == 3
        assert simple() == before
        for tensor in (*config["input"], *config["output"]):
            tensor["dims"] = [8]
        _load(sim, "simple", config)
        assert simple() != before
    finally:
        client.close()


def test_listed_models_keep_their_settings_and_win_over_discovered_ones() -> None:
    """A listed model found in the index appears once, with its own SLO; fixed lists stay."""
    config = parse_config(
        "targets:\n"
        "  - name: d\n"
        "    url: http://127.0.0.1:1\n"
        "    models: {listed: [{name: bert, slo: {latency: {threshold: 20ms}}}]}\n"
        "  - {name: f, url: http://127.0.0.1:2, models: [{name: only}]}\n",
        "c.yaml",
    )
    selection = config.targets[0].selection
    assert selection is not None
    names = select_names(selection, ["bert", "gpt"])
    found = {"d": tuple(FoundModel(n) for n in names), "f": (FoundModel("ignored"),)}
    resolved = with_discovered_models(config, found)
    discovering, fixed = resolved.targets
    assert [m.name for m in discovering.models] == ["bert", "gpt"]
    assert resolved.slo_for(discovering.models[0]).latency.threshold == 0.020
    assert discovering.models[1] == WatchedModel(name="gpt")
    assert [m.name for m in fixed.models] == ["only"]


def test_target_without_models_discovers_every_model() -> None:
    """``models:`` left out means every READY model (it used to be required)."""
    config = parse_config("targets: [{name: t, url: http://127.0.0.1:1}]\n", "c.yaml")
    assert config.targets[0].selection == ModelSelection()
    assert config.discovery.model_refresh_interval == 60.0
    assert config.discovery.max_models_per_target == 100


def test_an_unreachable_server_keeps_the_models_found_before(closed_url: str) -> None:
    """A failed index read must not drop the models (their series would vanish on a blip)."""
    config = parse_config(f"targets: [{{name: t, url: '{closed_url}'}}]\n", "c.yaml")
    discovery = ModelDiscovery(timeout=1.0)
    assert discovery.refresh(config) is False  # nothing before, nothing now
    discovery._found = {"t": (FoundModel("bert", "abc"),)}
    with capture_logs() as logs:
        assert discovery.refresh(config) is False
    assert discovery.found == {"t": (FoundModel("bert", "abc"),)}
    assert [log["event"] for log in logs] == ["model_discovery_failed"]


def _watched(daemon: Daemon) -> set[tuple[str, str]]:
    """(target, model) of every canary series on the daemon's /metrics."""
    status, text = http_get(f"{daemon.exporter_url}/metrics")
    assert status == 200
    return {
        (sample.labels["target"], sample.labels["model"])
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "tritonwatch_canary_requests_total"
    }


def test_each_replica_discovers_only_the_targets_it_owns(
    sim: Simulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replicas over file_sd targets that discover their models: breaks if a replica
    reads the index of a target it does not own, or a target is watched by none or both."""
    names = [f"triton-{i}" for i in range(6)]
    owned = {i: [n for n in names if Shard(i, 2).owns(n)] for i in (0, 1)}
    assert owned[0] and owned[1], "the names must put targets on both replicas"
    address = sim.http_url.removeprefix("http://")
    groups = [
        {"targets": [address], "labels": {"name": name, "metrics_url": sim.metrics_url}}
        for name in names
    ]
    (tmp_path / "targets.json").write_text(json.dumps(groups))
    path = tmp_path / "c.yaml"
    path.write_text("discovery: {files: [targets.json]}\n")
    asked: list[str] = []
    real_client_for = model_discovery.client_for

    def spied_client_for(target: TargetConfig, timeout: float) -> ModelApiClient:
        asked.append(target.name)
        return real_client_for(target, timeout)

    monkeypatch.setattr(model_discovery, "client_for", spied_client_for)
    watched = {}
    for index in (0, 1):
        asked.clear()
        daemon = Daemon(
            path, load_config(path), listen_override="127.0.0.1:0", shard=Shard(index, 2)
        )
        expected = {(target, model) for target in owned[index] for model in SIM_MODELS}
        daemon.start()
        try:
            wait_until(lambda d=daemon, e=expected: _watched(d) == e, 30, f"replica {index}")
            watched[index] = expected
        finally:
            daemon.stop()
        assert sorted(set(asked)) == owned[index]
    assert not watched[0] & watched[1]
    assert watched[0] | watched[1] == {(t, m) for t in names for m in SIM_MODELS}


def test_a_target_joining_the_fleet_has_its_models_read_at_once(
    sim: Simulator, tmp_path: Path
) -> None:
    """A file_sd target added later is read when it joins, not a refresh interval (here
    10 minutes) later: breaks if a new discovering target waits for the next read."""
    address = sim.http_url.removeprefix("http://")

    def write(*names: str) -> None:
        groups = [{"targets": [address], "labels": {"name": n, "metrics_url": sim.metrics_url}}
                  for n in names]  # fmt: skip
        (tmp_path / "targets.json").write_text(json.dumps(groups))

    write("first")
    path = tmp_path / "c.yaml"
    path.write_text(
        "discovery: {files: [targets.json], refresh_interval: 200ms, model_refresh_interval: 10m}\n"
    )
    daemon = Daemon(path, load_config(path), listen_override="127.0.0.1:0")
    daemon.start()
    try:
        first = {("first", model) for model in SIM_MODELS}
        wait_until(lambda: _watched(daemon) == first, 30, "the first target's models")
        write("first", "second")
        both = first | {("second", model) for model in SIM_MODELS}
        wait_until(lambda: _watched(daemon) == both, 30, "the joining target's models")
    finally:
        daemon.stop()
