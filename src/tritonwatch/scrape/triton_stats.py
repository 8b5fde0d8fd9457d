"""Triton's statistics extension: the batch-size distribution and its rates.

``GET v2/models/{m}[/versions/{v}]/stats`` answers ``{"model_stats": [...]}`` with one
entry per version (``docs/protocol/extension_statistics.md``). ``/metrics`` already gives
rates and stage averages; what only this API has is ``batch_stats``: per executed batch
size, how many executions ran at that size. Its deltas give the per-size execution rate
and the true average batch size (Σ size·Δexecutions / ΣΔexecutions).

Counts arrive as JSON numbers from Triton's HTTP frontend, and as decimal strings where
a proxy or tool printed the gRPC message with protobuf's JSON printer (uint64 → string);
both are read. Statistics belong to the loaded model, so a reload that replaces it
starts them from zero: a count that went down is a reset, handled as in
:mod:`~tritonwatch.scrape.triton_deltas`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from tritonwatch.observations import BatchStatisticsRates, ModelStatistics
from tritonwatch.scrape.triton_deltas import counter_increase


def _count(value: Any, where: str) -> int:
    """A non-negative count, as a JSON number or a decimal string."""
    if isinstance(value, bool):
        raise ValueError(f"{where} must be a count, got: {value!r}")
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, float) and value >= 0 and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    raise ValueError(f"{where} must be a count, got: {value!r}")


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be an object, got: {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list, got: {type(value).__name__}")
    return value


def parse_model_statistics(document: Any, model: str, version: str, at: float) -> ModelStatistics:
    """Reads one model's entries from a statistics response.

    Args:
        document: the decoded JSON body.
        model: the model's name; entries of other models are ignored.
        version: the configured version; "" sums every version the server reports.
        at: the caller's monotonic time of the read.

    Raises:
        ValueError: the document is not a statistics response, or has no entry for the
            model (version).
    """
    entries = _list(_object(document, "statistics").get("model_stats"), "model_stats")
    inference = execution = success = 0
    batches: dict[int, int] = {}
    found = False
    for index, raw in enumerate(entries):
        entry = _object(raw, f"model_stats[{index}]")
        if entry.get("name") != model or (version and str(entry.get("version", "")) != version):
            continue
        found = True
        where = f"model_stats[{index}]"
        inference += _count(entry.get("inference_count", 0), f"{where}.inference_count")
        execution += _count(entry.get("execution_count", 0), f"{where}.execution_count")
        stats = _object(entry.get("inference_stats") or {}, f"{where}.inference_stats")
        success_stat = _object(stats.get("success") or {}, f"{where}.inference_stats.success")
        success += _count(success_stat.get("count", 0), f"{where}.inference_stats.success.count")
        for position, raw_batch in enumerate(_list(entry.get("batch_stats"), "batch_stats")):
            at_batch = f"{where}.batch_stats[{position}]"
            batch = _object(raw_batch, at_batch)
            size = _count(batch.get("batch_size"), f"{at_batch}.batch_size")
            infer = _object(batch.get("compute_infer") or {}, f"{at_batch}.compute_infer")
            executions = _count(infer.get("count", 0), f"{at_batch}.compute_infer.count")
            batches[size] = batches.get(size, 0) + executions
    if not found:
        named = f"{model} version {version}" if version else model
        raise ValueError(f"no statistics for model {named}")
    return ModelStatistics(
        model=model,
        version=version,
        at=at,
        inference_count=inference,
        execution_count=execution,
        success_count=success,
        batch_executions=MappingProxyType(dict(sorted(batches.items()))),
    )


def statistics_were_reset(previous: ModelStatistics, current: ModelStatistics) -> bool:
    """True when any count went down, or a batch size seen before is gone."""
    if (
        current.inference_count < previous.inference_count
        or current.execution_count < previous.execution_count
        or current.success_count < previous.success_count
    ):
        return True
    return any(
        current.batch_executions.get(size, -1) < count
        for size, count in previous.batch_executions.items()
    )


def batch_statistics_rates(
    previous: ModelStatistics, current: ModelStatistics
) -> BatchStatisticsRates:
    """Per-size execution rates and the average batch size between two reads.

    A batch size absent from ``previous`` had not executed yet, so it grew from zero.

    Raises:
        ValueError: ``current`` was not read after ``previous``.
    """
    interval = current.at - previous.at
    if not interval > 0:
        raise ValueError(f"the current read must come after the previous one, got: {interval} s")
    reset = statistics_were_reset(previous, current)
    increases = {
        size: counter_increase(previous.batch_executions.get(size, 0), count, reset) or 0
        for size, count in current.batch_executions.items()
    }
    executions = sum(increases.values())
    inferences = sum(size * count for size, count in increases.items())
    return BatchStatisticsRates(
        model=current.model,
        version=current.version,
        interval_seconds=interval,
        counters_reset=reset,
        executions_per_second_by_size=MappingProxyType(
            {size: count / interval for size, count in increases.items()}
        ),
        batch_size_average=inferences / executions if executions > 0 else None,
    )
