"""Triton's statistics extension: the batch-size distribution and its rates.

``GET v2/models/{m}[/versions/{v}]/stats`` answers ``{"model_stats": [...]}`` with one
entry per version (``docs/protocol/extension_statistics.md``); ``GET v2/models/stats``
answers the same shape with an entry per ready version of every loaded model, read by
:func:`parse_all_model_statistics` for many models at once. ``/metrics`` already gives
rates and stage averages; what only this API has is ``batch_stats``: per executed batch
size, how many executions ran at that size. Its deltas give the per-size execution rate
and the true average batch size (Σ size·Δexecutions / ΣΔexecutions).

``inference_stats.cache_hit`` and ``cache_miss`` ({count, ns}) are read too: the response
cache's readings for a server whose ``/metrics`` lacks the per-model cache families
(:mod:`~tritonwatch.scrape.statistics_cache`; ``/metrics`` wins when both are there).

Counts arrive as JSON numbers from Triton's HTTP frontend, and as decimal strings where
a proxy or tool printed the gRPC message with protobuf's JSON printer (uint64 → string);
both are read. Statistics belong to the loaded model, so a reload that replaces it
starts them from zero: a count that went down is a reset, handled as in
:mod:`~tritonwatch.scrape.triton_deltas`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from tritonwatch.records.counters import counter_increase
from tritonwatch.records.observations import BatchStatisticsRates, ModelKey, ModelStatistics
from tritonwatch.scrape.statistics_cache import statistics_cache_rates


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


def _entries(document: Any) -> list[Mapping[str, Any]]:
    """The entries of a statistics response; ValueError for anything else."""
    entries = _list(_object(document, "statistics").get("model_stats"), "model_stats")
    return [_object(raw, f"model_stats[{index}]") for index, raw in enumerate(entries)]


def _duration(stats: Mapping[str, Any], name: str, where: str) -> tuple[int, int]:
    """(count, ns) of one ``inference_stats`` duration; (0, 0) where it is not printed
    (a gRPC answer leaves out a field at its default)."""
    stat = _object(stats.get(name) or {}, f"{where}.{name}")
    count = _count(stat.get("count", 0), f"{where}.{name}.count")
    return count, _count(stat.get("ns", 0), f"{where}.{name}.ns")


def _wanted(entry: Mapping[str, Any], model: str, version: str) -> bool:
    return entry.get("name") == model and (not version or str(entry.get("version", "")) == version)


def _summed(
    entries: Sequence[tuple[int, Mapping[str, Any]]], model: str, version: str, at: float
) -> ModelStatistics:
    """One model's record from its entries (with their positions in ``model_stats``)."""
    inference = execution = success = 0
    cache = [0, 0, 0, 0]  # hits, hit ns, misses, miss ns
    batches: dict[int, int] = {}
    for index, entry in entries:
        where = f"model_stats[{index}]"
        inference += _count(entry.get("inference_count", 0), f"{where}.inference_count")
        execution += _count(entry.get("execution_count", 0), f"{where}.execution_count")
        stats = _object(entry.get("inference_stats") or {}, f"{where}.inference_stats")
        success_stat = _object(stats.get("success") or {}, f"{where}.inference_stats.success")
        success += _count(success_stat.get("count", 0), f"{where}.inference_stats.success.count")
        read = (
            *_duration(stats, "cache_hit", f"{where}.inference_stats"),
            *_duration(stats, "cache_miss", f"{where}.inference_stats"),
        )
        cache = [total + value for total, value in zip(cache, read, strict=True)]
        for position, raw_batch in enumerate(_list(entry.get("batch_stats"), "batch_stats")):
            at_batch = f"{where}.batch_stats[{position}]"
            batch = _object(raw_batch, at_batch)
            size = _count(batch.get("batch_size"), f"{at_batch}.batch_size")
            infer = _object(batch.get("compute_infer") or {}, f"{at_batch}.compute_infer")
            executions = _count(infer.get("count", 0), f"{at_batch}.compute_infer.count")
            batches[size] = batches.get(size, 0) + executions
    return ModelStatistics(
        model=model,
        version=version,
        at=at,
        inference_count=inference,
        execution_count=execution,
        success_count=success,
        batch_executions=MappingProxyType(dict(sorted(batches.items()))),
        cache_hits=cache[0],
        cache_hit_ns=cache[1],
        cache_misses=cache[2],
        cache_miss_ns=cache[3],
        versions=tuple(sorted({str(entry.get("version", "")) for _, entry in entries})),
    )


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
    entries = [
        (index, entry)
        for index, entry in enumerate(_entries(document))
        if _wanted(entry, model, version)
    ]
    if not entries:
        named = f"{model} version {version}" if version else model
        raise ValueError(f"no statistics for model {named}")
    return _summed(entries, model, version, at)


def parse_all_model_statistics(
    document: Any, keys: Iterable[ModelKey], at: float
) -> tuple[dict[str, ModelStatistics], dict[str, str]]:
    """Reads many models' records from one statistics response (the all-models form).

    Each key is read as :func:`parse_model_statistics` reads it (``version`` "" sums
    every version reported), and the entries are grouped by name once, so the cost
    grows with the document, not with models × entries.

    Returns:
        The records by model name, and the error of each model whose entries are
        malformed. A model (version) with no entry is in neither: the caller decides
        what its absence means.

    Raises:
        ValueError: the document is not a statistics response (here ``model_stats`` must
            be present: Triton prints it even when no model is loaded, and a server
            that answers the path with some other object must not read as "no models").
    """
    if "model_stats" not in _object(document, "statistics"):
        raise ValueError("no model_stats: not a statistics response")
    by_name: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
    for index, entry in enumerate(_entries(document)):
        name = entry.get("name")
        if isinstance(name, str):
            by_name.setdefault(name, []).append((index, entry))
    parsed: dict[str, ModelStatistics] = {}
    malformed: dict[str, str] = {}
    for key in keys:
        entries = [
            (index, entry)
            for index, entry in by_name.get(key.model, ())
            if _wanted(entry, key.model, key.version)
        ]
        if not entries:
            continue
        try:
            parsed[key.model] = _summed(entries, key.model, key.version, at)
        except ValueError as error:
            malformed[key.model] = str(error)
    return parsed, malformed


def statistics_were_reset(previous: ModelStatistics, current: ModelStatistics) -> bool:
    """True when any count went down, or a batch size seen before is gone."""
    if (
        current.inference_count < previous.inference_count
        or current.execution_count < previous.execution_count
        or current.success_count < previous.success_count
        or current.cache_hits < previous.cache_hits
        or current.cache_hit_ns < previous.cache_hit_ns
        or current.cache_misses < previous.cache_misses
        or current.cache_miss_ns < previous.cache_miss_ns
    ):
        return True
    return any(
        current.batch_executions.get(size, -1) < count
        for size, count in previous.batch_executions.items()
    )


def batch_statistics_rates(
    previous: ModelStatistics, current: ModelStatistics, *, response_cache: bool = False
) -> BatchStatisticsRates:
    """Per-size execution rates, the average batch size and the response cache's rates
    between two reads.

    A batch size absent from ``previous`` had not executed yet, so it grew from zero.
    ``response_cache``: the model's config enables the cache, so its rates are given
    even before a lookup was counted (see
    :func:`~tritonwatch.scrape.statistics_cache.statistics_cache_rates`).

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
        cache=statistics_cache_rates(
            previous, current, interval, reset, response_cache=response_cache
        ),
    )
