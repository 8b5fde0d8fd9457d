"""Model discovery's pure parts: index rows, include/exclude, the cap, the merge."""

from __future__ import annotations

from structlog.testing import capture_logs

from tritonwatch.config import parse_config
from tritonwatch.config.schema import ModelSelection, WatchedModel
from tritonwatch.model_discovery import (
    FoundModel,
    ModelDiscovery,
    parse_index,
    ready_names,
    select_names,
    with_discovered_models,
)

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
    assert ready_names(parse_index({"models": INDEX})) == ["bert", "bert_test"]  # gRPC JSON


def test_include_and_exclude_filter_by_search() -> None:
    """``include`` and ``exclude`` are regular expressions searched in the name."""
    selection = ModelSelection(include="^bert", exclude="_test$")
    names = ["bert", "bert_test", "gpt", "my_bert"]
    assert select_names("t", selection, names, cap=100) == ["bert"]
    assert select_names("t", ModelSelection(), names, cap=100) == sorted(names)


def test_cap_keeps_the_first_by_name_and_is_logged() -> None:
    """More models than the cap: the first ``cap`` by name, and a warning saying so."""
    with capture_logs() as logs:
        chosen = select_names("t", ModelSelection(), [f"m{i:03}" for i in range(105)], cap=100)
    assert chosen == [f"m{i:03}" for i in range(100)]
    (log,) = [entry for entry in logs if entry["event"] == "model_discovery_cap_reached"]
    assert (log["found"], log["cap"], log["left_out"]) == (
        105,
        100,
        [f"m{i}" for i in range(100, 105)],
    )


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
    names = select_names("d", selection, ["bert", "gpt"], cap=100)
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
