"""gRPC answers in the HTTP answers' shape, on answers recorded from a real Triton 2.51.

Each fixture in tests/fixtures/triton_grpc was read over both protocols at one moment
(see its .source.txt), so the converted gRPC answer must equal the HTTP one exactly.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from support import fixtures_dir
from tritonwatch.common.grpc_json import answer_type, grpc_json_as_http
from tritonwatch.scrape.triton_config import parse_model_config
from tritonwatch.scrape.triton_stats import parse_model_statistics

MODELS = ("slow_queue", "batching")
PRINTINGS = ("grpc", "grpc-camel")


def recorded(model: str, api: str, printing: str) -> Any:
    return json.loads(
        (fixtures_dir() / "triton_grpc" / f"{model}.{api}.{printing}.json").read_text()
    )


@pytest.mark.parametrize("printing", PRINTINGS)
@pytest.mark.parametrize("api", ["stats", "config", "metadata"])
@pytest.mark.parametrize("model", MODELS)
def test_a_grpc_answer_becomes_the_http_answer(model: str, api: str, printing: str) -> None:
    """Breaks if any field keeps gRPC's printing: a camelCase name, an int64 string, a
    default left out, the config's {"config": ...} wrapper."""
    assert grpc_json_as_http(recorded(model, api, printing)) == recorded(model, api, "http")


def test_the_numbers_the_scraper_reads_are_numbers() -> None:
    """Breaks if int64 fields stay strings where the HTTP answer has numbers."""
    stats = grpc_json_as_http(recorded("batching", "stats", "grpc"))["model_stats"][0]
    assert stats["inference_stats"]["success"] == {"count": 48, "ns": 907606314}
    assert stats["inference_stats"]["fail"] == {"count": 0, "ns": 0}  # left out over gRPC
    assert [batch["batch_size"] for batch in stats["batch_stats"]] == [2, 3, 4, 5, 6, 7, 8]
    config = grpc_json_as_http(recorded("slow_queue", "config", "grpc-camel"))
    assert config["max_batch_size"] == 8
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 30000
    assert config["input"][0]["dims"] == [16]
    assert config["instance_group"][0]["kind"] == "KIND_CPU"


@pytest.mark.parametrize("printing", PRINTINGS)
@pytest.mark.parametrize("model", MODELS)
def test_the_scrape_records_are_the_same_from_both_protocols(model: str, printing: str) -> None:
    """Breaks if the statistics or config parser reads a gRPC answer differently."""
    stats = {
        form: parse_model_statistics(
            grpc_json_as_http(recorded(model, "stats", form)), model, "", 1.0
        )
        for form in ("http", printing)
    }
    assert stats["http"] == stats[printing]
    assert stats["http"].success_count > 0
    configs = {
        form: parse_model_config(grpc_json_as_http(recorded(model, "config", form)), model, 1.0)
        for form in ("http", printing)
    }
    assert configs["http"] == configs[printing]


def test_map_keys_are_user_data_and_stay_as_they_are() -> None:
    """Breaks if a map's keys are renamed, or its string values are turned into numbers
    because a key looks like a field name."""
    document = {
        "name": "m",
        "parameters": {"fooBar": {"stringValue": "7"}},
        "metricTags": {"count": "5"},
        "dynamicBatching": {"priorityQueuePolicy": {"2": {"defaultTimeoutMicroseconds": "9"}}},
    }
    config = grpc_json_as_http(document)
    assert config["parameters"] == {"fooBar": {"string_value": "7"}}
    assert config["metric_tags"] == {"count": "5"}
    policy = config["dynamic_batching"]["priority_queue_policy"]["2"]
    assert policy["default_timeout_microseconds"] == 9


def test_the_answer_type_is_recognised_by_its_fields() -> None:
    """Breaks if a config is taken for metadata (or the reverse): the wrong int64 fields."""
    assert answer_type(recorded("slow_queue", "config", "grpc")).__name__ == "ModelConfigResponse"
    assert answer_type(recorded("slow_queue", "config", "http")).__name__ == "ModelConfig"
    assert answer_type(recorded("slow_queue", "metadata", "grpc")).__name__ == (
        "ModelMetadataResponse"
    )
    assert answer_type(recorded("slow_queue", "stats", "grpc")).__name__ == (
        "ModelStatisticsResponse"
    )


def test_a_document_that_is_no_triton_answer_is_a_clear_error() -> None:
    """Breaks if garbage passes as an answer (or fails with a protobuf traceback)."""
    with pytest.raises(ValueError, match="not a Triton gRPC answer"):
        grpc_json_as_http({"model_stats": [], "whatever": 1})
    with pytest.raises(ValueError, match="not a ModelConfig"):
        grpc_json_as_http({"max_batch_size": "eight"})
