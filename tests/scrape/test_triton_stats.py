"""The statistics extension: reading ``model_stats`` and the batch-size rates between reads."""

from __future__ import annotations

from typing import Any

import pytest

from tritonwatch.records.observations import ModelKey, ModelStatistics
from tritonwatch.scrape.triton_stats import (
    batch_statistics_rates,
    parse_all_model_statistics,
    parse_model_statistics,
)


def duration(count: int | str, ns: int | str = 0) -> dict[str, Any]:
    return {"count": count, "ns": ns}


def entry(name: str, version: str, batches: dict[int, int], **counts: int | str) -> dict[str, Any]:
    """One ``model_stats`` entry shaped as Triton's docs show it."""
    success = counts.get("success", sum(size * n for size, n in batches.items()))
    return {
        "name": name,
        "version": version,
        "last_inference": 1_700_000_000_000,
        "inference_count": counts.get("inference_count", success),
        "execution_count": counts.get("execution_count", sum(batches.values())),
        "inference_stats": {
            "success": duration(success, 1000),
            "fail": duration(0),
            "queue": duration(success, 10),
            "compute_input": duration(success),
            "compute_infer": duration(success),
            "compute_output": duration(success),
            "cache_hit": duration(0),
        },
        "batch_stats": [
            {
                "batch_size": size,
                "compute_input": duration(n),
                "compute_infer": duration(n, 5000),
                "compute_output": duration(n),
            }
            for size, n in batches.items()
        ],
    }


def read(batches: dict[int, int], at: float, **counts: int) -> ModelStatistics:
    document = {"model_stats": [entry("resnet50", "1", batches, **counts)]}
    return parse_model_statistics(document, "resnet50", "", at)


def test_reads_counts_and_the_batch_size_distribution() -> None:
    """model_stats is read into its counts, batch-size executions and the read's time."""
    stats = read({1: 3, 8: 2}, at=5.0)
    assert stats.inference_count == 19
    assert stats.execution_count == 5
    assert stats.success_count == 19
    assert dict(stats.batch_executions) == {1: 3, 8: 2}
    assert stats.at == 5.0


def test_counts_printed_as_strings_are_read() -> None:
    """protobuf's JSON printer writes uint64 as strings (a gRPC answer printed as JSON)."""
    document = {"model_stats": [entry("m", "1", {4: 2}, inference_count="8")]}
    document["model_stats"][0]["batch_stats"][0]["compute_infer"]["count"] = "2"
    stats = parse_model_statistics(document, "m", "", 0.0)
    assert stats.inference_count == 8
    assert dict(stats.batch_executions) == {4: 2}


def test_versions_are_summed_unless_one_is_configured() -> None:
    """Batch executions of all versions are summed, or of the configured version only."""
    document = {
        "model_stats": [
            entry("m", "1", {1: 10}),
            entry("m", "2", {1: 5, 2: 1}),
            entry("other", "1", {1: 99}),
        ]
    }
    assert dict(parse_model_statistics(document, "m", "", 0.0).batch_executions) == {1: 15, 2: 1}
    assert dict(parse_model_statistics(document, "m", "2", 0.0).batch_executions) == {1: 5, 2: 1}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "statistics must be an object, got: list"),
        ({"model_stats": {}}, "model_stats must be a list, got: dict"),
        ({"model_stats": []}, "no statistics for model m"),
        ({"model_stats": [entry("m", "1", {1: 1})]}, "no statistics for model m version 3"),
        (
            {"model_stats": [{**entry("m", "1", {}), "execution_count": -1}]},
            r"model_stats\[0\].execution_count must be a count, got: -1",
        ),
        (
            {"model_stats": [{**entry("m", "1", {}), "batch_stats": [{"batch_size": "x"}]}]},
            r"model_stats\[0\].batch_stats\[0\].batch_size must be a count, got: 'x'",
        ),
    ],
)
def test_malformed_documents_name_the_field(document: Any, message: str) -> None:
    """A document that is not a statistics answer is refused, naming the field and value."""
    with pytest.raises(ValueError, match=message):
        parse_model_statistics(document, "m", "3" if "version" in message else "", 0.0)


ALL_MODELS_ANSWER = {
    "model_stats": [
        entry("a", "1", {1: 10}),
        entry("a", "2", {1: 5, 2: 1}),
        entry("b", "1", {4: 3}, inference_count="12"),
        entry("not_watched", "1", {1: 99}),
    ]
}


def test_one_answer_gives_every_model_as_its_own_answer_would() -> None:
    """Breaks if a model read out of the all-models answer differs from reading the same
    entries model by model (versions summed, or the configured one only)."""
    keys = [ModelKey("a", ""), ModelKey("b", "")]
    parsed, malformed = parse_all_model_statistics(ALL_MODELS_ANSWER, keys, 7.0)
    assert malformed == {}
    assert parsed == {
        key.model: parse_model_statistics(ALL_MODELS_ANSWER, key.model, key.version, 7.0)
        for key in keys
    }
    assert dict(parsed["a"].batch_executions) == {1: 15, 2: 1}
    assert parsed["b"].inference_count == 12
    only_v2, _ = parse_all_model_statistics(ALL_MODELS_ANSWER, [ModelKey("a", "2")], 7.0)
    assert only_v2 == {"a": parse_model_statistics(ALL_MODELS_ANSWER, "a", "2", 7.0)}


def test_a_model_or_version_without_entries_is_neither_parsed_nor_malformed() -> None:
    """Breaks if an absent model is reported as malformed (the scraper asks Triton about
    it instead, to get Triton's own "not available" answer)."""
    keys = [ModelKey("gone", ""), ModelKey("b", "7"), ModelKey("b", "1")]
    parsed, malformed = parse_all_model_statistics(ALL_MODELS_ANSWER, keys, 0.0)
    assert set(parsed) == {"b"} and parsed["b"].version == "1"
    assert malformed == {}
    assert parse_all_model_statistics({"model_stats": []}, keys, 0.0) == ({}, {})


def test_a_malformed_entry_fails_only_its_model() -> None:
    """Breaks if one model's bad count loses every other model's statistics."""
    document = {
        "model_stats": [{**entry("a", "1", {}), "execution_count": -1}, entry("b", "1", {})]
    }
    parsed, malformed = parse_all_model_statistics(
        document, [ModelKey("a", ""), ModelKey("b", "")], 0.0
    )
    assert set(parsed) == {"b"}
    assert malformed == {"a": "model_stats[0].execution_count must be a count, got: -1"}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "statistics must be an object, got: list"),
        ({"model_stats": {}}, "model_stats must be a list, got: dict"),
        ({"model_stats": [1]}, r"model_stats\[0\] must be an object, got: int"),
        ({"name": "stats", "versions": [], "platform": ""}, "no model_stats: not a statistics"),
    ],
)
def test_not_a_statistics_answer_is_refused_whole(document: Any, message: str) -> None:
    """Breaks if MLServer's metadata of a model called "stats" (its answer to
    GET /v2/models/stats) reads as a statistics answer in which no model is present."""
    with pytest.raises(ValueError, match=message):
        parse_all_model_statistics(document, [ModelKey("a", "")], 0.0)


def test_per_size_execution_rates_and_the_true_average() -> None:
    """Δexecutions per size over the interval; average = Σ size·Δ / ΣΔ."""
    rates = batch_statistics_rates(read({1: 3, 8: 2}, 0.0), read({1: 5, 8: 8, 4: 4}, 10.0))
    assert dict(rates.executions_per_second_by_size) == pytest.approx({1: 0.2, 4: 0.4, 8: 0.6})
    # 2 × 1 + 4 × 4 + 6 × 8 = 66 inferences in 12 executions.
    assert rates.batch_size_average == pytest.approx(66 / 12)
    assert rates.counters_reset is False
    assert rates.interval_seconds == 10.0


def test_an_idle_window_has_no_average() -> None:
    """A window with no new executions has zero rates and no batch size average."""
    rates = batch_statistics_rates(read({2: 3}, 0.0), read({2: 3}, 15.0))
    assert dict(rates.executions_per_second_by_size) == {2: 0.0}
    assert rates.batch_size_average is None


def test_a_reload_that_restarts_the_counts_is_a_reset() -> None:
    """Counts went down (the model was replaced): increases are taken from zero."""
    rates = batch_statistics_rates(read({1: 50, 8: 20}, 0.0), read({1: 4}, 10.0))
    assert rates.counters_reset is True
    assert dict(rates.executions_per_second_by_size) == pytest.approx({1: 0.4})
    assert rates.batch_size_average == 1.0


def test_rates_need_time_to_pass() -> None:
    """Two statistics reads at the same time are refused rather than divided by zero."""
    with pytest.raises(ValueError, match=r"must come after the previous one, got: 0\.0 s"):
        batch_statistics_rates(read({1: 1}, 3.0), read({1: 2}, 3.0))
