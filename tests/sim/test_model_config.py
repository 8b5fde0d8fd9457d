"""Model configuration: Triton's JSON shape, overrides, in-place changes, metadata."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tritonwatch.sim.errors import SimError
from tritonwatch.sim.model_config import (
    build_config,
    config_to_json,
    model_metadata,
    only_instance_count_differs,
    parse_override,
    spec_from_config,
)
from tritonwatch.sim.testing import builtin_model

pytestmark = pytest.mark.sim

RESNET = builtin_model("resnet50")


def test_config_json_has_the_fields_and_order_of_a_real_server(fixtures_dir: Path) -> None:
    """Same top-level keys in the same order as a recorded config (plus newer ``runtime``)."""
    recorded = json.loads(
        (fixtures_dir / "triton_config" / "config_01_phishing-bert-onnx.json").read_text()
    )
    ours = config_to_json(build_config(RESNET))
    assert [key for key in ours if key != "runtime"] == list(recorded)
    assert list(ours["dynamic_batching"]) == list(recorded["dynamic_batching"])
    assert list(ours["instance_group"][0]) == list(recorded["instance_group"][0])
    assert set(recorded["input"][0]) <= set(ours["input"][0])
    assert list(ours["optimization"])[:1] == ["priority"]


def test_config_json_prints_defaults_enums_and_numbers_like_triton(fixtures_dir: Path) -> None:
    """Enums as names, 64-bit integers as numbers, empty repeated fields and maps printed."""
    ours = config_to_json(build_config(RESNET))
    assert ours["input"][0]["data_type"] == "TYPE_FP32"
    assert ours["input"][0]["format"] == "FORMAT_NONE"
    assert ours["instance_group"][0] == {
        "name": "resnet50_0",
        "kind": "KIND_GPU",
        "count": 2,
        "gpus": [1],
        "secondary_devices": [],
        "profile": [],
        "passive": False,
        "host_policy": "",
    }
    assert ours["dynamic_batching"]["max_queue_delay_microseconds"] == 2000
    assert ours["dynamic_batching"]["preferred_batch_size"] == [8, 16, 32]
    assert ours["input"][0]["dims"] == [3, 32, 32]
    assert ours["version_policy"] == {"latest": {"num_versions": 1}}
    assert ours["batch_input"] == [] and ours["parameters"] == {}
    recorded = json.loads(
        (fixtures_dir / "triton_config" / "config_02_abp-nvsmi-xgb.body.json").read_text()
    )
    assert isinstance(recorded["dynamic_batching"]["max_queue_delay_microseconds"], int)


def test_override_round_trips_to_the_same_model() -> None:
    """Loading the config we print gives back the very same simulated model."""
    text = json.dumps(config_to_json(build_config(RESNET)))
    assert spec_from_config(RESNET, parse_override("resnet50", text)) == RESNET


def test_override_changes_batching_and_instances() -> None:
    """A client's config sets max_queue_delay, preferred sizes and the instance count."""
    document = config_to_json(build_config(RESNET))
    document["dynamic_batching"]["max_queue_delay_microseconds"] = 500
    document["dynamic_batching"]["preferred_batch_size"] = []
    document["instance_group"][0]["count"] = 4
    spec = spec_from_config(RESNET, parse_override("resnet50", json.dumps(document)))
    assert spec.dynamic_batching is not None
    assert spec.dynamic_batching.max_queue_delay_microseconds == 500
    # Triton normalises "no preferred sizes" to [max_batch_size]; the batcher treats both alike.
    assert spec.dynamic_batching.preferred_batch_size == (32,)
    assert spec.instance_group.count == 4
    assert spec.timing == RESNET.timing


def test_only_instance_count_changes_are_detected() -> None:
    """Count-only edits apply in place; any other edit (here the delay) is a reload."""
    base = build_config(RESNET)
    counted = parse_override("resnet50", json.dumps(config_to_json(base)))
    counted.instance_group[0].count = 5
    assert only_instance_count_differs(base, counted)
    delayed = parse_override("resnet50", json.dumps(config_to_json(base)))
    delayed.dynamic_batching.max_queue_delay_microseconds = 1
    assert not only_instance_count_differs(base, delayed)


POLL_FAILED = "failed to load 'resnet50', failed to poll from model repository"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{not json", "Invalid config override: "),
        (
            '{"name": "other"}',
            "unexpected directory name 'resnet50' for model 'other', directory name must "
            "equal model name",
        ),
        ('{"max_batch_sizes": 3}', "Invalid config override: "),
    ],
)
def test_bad_override_is_rejected_with_triton_style_message(text: str, reason: str) -> None:
    """Unparseable or mismatched configs fail the load as Triton's poll does: INTERNAL with
    its fixed message, the cause (what Triton logs) in ``detail``."""
    with pytest.raises(SimError) as caught:
        parse_override("resnet50", text)
    assert caught.value.message == POLL_FAILED
    assert caught.value.code.http_status == 500
    assert caught.value.detail.startswith(reason)


def test_override_the_simulator_cannot_run_is_rejected() -> None:
    """Preferred batch sizes without a batch dimension fail validation, naming the problem."""
    document = config_to_json(build_config(RESNET))
    document["max_batch_size"] = 0
    with pytest.raises(SimError) as caught:
        spec_from_config(RESNET, parse_override("resnet50", json.dumps(document)))
    assert caught.value.message == POLL_FAILED
    assert "preferred_batch_size must not exceed max_batch_size 0" in caught.value.detail


def test_metadata_adds_the_batch_dimension() -> None:
    """Model metadata shows wire data types and -1 for the batch dimension."""
    assert model_metadata(RESNET) == {
        "name": "resnet50",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 3, 32, 32]}],
        "outputs": [{"name": "output", "datatype": "FP32", "shape": [-1, 10]}],
    }
