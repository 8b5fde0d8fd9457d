"""Model config snapshots from real ``/config`` answers, and naming what changed."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from support import fixtures_dir
from tritonwatch.records.observations import DynamicBatching, InstanceGroup, ModelConfigSnapshot
from tritonwatch.scrape.triton_config import config_changes, flatten, parse_model_config


def fixture(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((fixtures_dir() / "triton_config" / name).read_text())
    return document


def snapshot(document: dict[str, Any], at: float = 0.0) -> ModelConfigSnapshot:
    return parse_model_config(document, str(document.get("name", "m")), at)


def test_reads_a_real_config() -> None:
    """phishing-bert-onnx as a real Triton printed it."""
    config = snapshot(fixture("config_01_phishing-bert-onnx.json"), at=3.0)
    assert config.max_batch_size == 32
    assert config.dynamic_batching == DynamicBatching((1, 4, 8, 12, 16, 20, 24, 28, 32), 50000)
    assert config.instance_groups == (InstanceGroup("phishing-bert-onnx", "KIND_GPU", 1, (0,)),)
    assert config.raw["backend"] == "onnxruntime"
    assert config.at == 3.0


def test_instances_count_per_listed_gpu() -> None:
    """abp-nvsmi-xgb asks for count 1 on each of 8 GPUs: 8 instances."""
    (group,) = snapshot(fixture("config_02_abp-nvsmi-xgb.body.json")).instance_groups
    assert (group.count, group.gpus, group.instances) == (1, (0, 1, 2, 3, 4, 5, 6, 7), 8)
    assert InstanceGroup("cpu", "KIND_CPU", 3, ()).instances == 3


def test_a_config_without_batcher_or_groups() -> None:
    """A config without dynamic batching or instance groups reads as None and none."""
    config = parse_model_config({"name": "m", "max_batch_size": 0}, "m", 0.0)
    assert config.dynamic_batching is None
    assert config.instance_groups == ()


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "a model config must be a JSON object, got: list"),
        ({"max_batch_size": "eight"}, "max_batch_size must be an integer, got: 'eight'"),
        ({"dynamic_batching": []}, r"dynamic_batching must be an object, got: \[\]"),
        ({"instance_group": [{"count": 1.5}]}, r"instance_group\[0\].count must be an integer"),
    ],
)
def test_malformed_configs_name_the_field(document: Any, message: str) -> None:
    """A malformed config is refused, naming the field and what it got."""
    with pytest.raises(ValueError, match=message):
        parse_model_config(document, "m", 0.0)


def test_int64_fields_printed_as_strings_are_read() -> None:
    """Int64 fields that Triton prints as strings are read as integers."""
    config = parse_model_config({"max_batch_size": "16"}, "m", 0.0)
    assert config.max_batch_size == 16


def test_flatten_names_every_leaf() -> None:
    """Objects by key, lists of objects by index, lists of scalars whole."""
    assert flatten(
        {"a": {"b": 1, "c": [1, 2]}, "groups": [{"count": 1}, {"count": 2}], "empty": {}}
    ) == {"a.b": 1, "a.c": (1, 2), "groups[0].count": 1, "groups[1].count": 2, "empty": {}}


def test_changes_name_each_changed_field_old_to_new() -> None:
    """Halving the queue delay and adding an instance: two changes, nothing else."""
    before = fixture("config_01_phishing-bert-onnx.json")
    after = copy.deepcopy(before)
    after["dynamic_batching"]["max_queue_delay_microseconds"] = 25000
    after["instance_group"][0]["count"] = 2
    assert config_changes(snapshot(before), snapshot(after, 15.0)) == {
        "dynamic_batching.max_queue_delay_microseconds": (50000, 25000),
        "instance_group[0].count": (1, 2),
    }


def test_switching_the_batcher_off_shows_its_fields_leaving() -> None:
    """Switching the batcher off shows each of its fields going to None, nothing else."""
    before = fixture("config_02_abp-nvsmi-xgb.body.json")
    after = {key: value for key, value in before.items() if key != "dynamic_batching"}
    changes = config_changes(snapshot(before), snapshot(after))
    assert changes["dynamic_batching.max_queue_delay_microseconds"] == (50000, None)
    assert all(path.startswith("dynamic_batching.") for path in changes)


def test_an_unchanged_config_has_no_changes() -> None:
    """The same config read again later has no changes."""
    document = fixture("config_01_phishing-bert-onnx.json")
    assert config_changes(snapshot(document), snapshot(copy.deepcopy(document), 60.0)) == {}
