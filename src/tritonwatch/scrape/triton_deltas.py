"""Rates and per-request averages between two scrapes of the same Triton server.

Pure functions of two :class:`~tritonwatch.records.observations.TritonScrape` records
(docs/design.md §4): requests/s from ``Δnv_inference_request_success``, average batch size
``Δnv_inference_count / Δnv_inference_exec_count``, and the average time per request
in each stage ``Δduration_us / Δrequests / 1e6`` seconds; for a model with a response
cache, its hit ratio and the mean time of a hit and of a miss (:func:`cache_rates`).

Counter resets. Triton restarts (and model reloads) start counters from zero. As in
Prometheus' ``rate()``, a counter that went down is taken to have restarted, so its
increase is its new value and no rate is ever negative. Unlike ``rate()``, the
decision is per model: when any counter of a model went down, every counter of that
model is taken from zero, so an average never divides a post-restart duration by a
pre-restart count. A reset hidden between two scrapes (the new value already above
the old one) cannot be seen by anyone, Prometheus included.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from tritonwatch.records.counters import counter_increase
from tritonwatch.records.observations import (
    CacheRates,
    ModelCounters,
    ModelRates,
    TritonGpuRates,
    TritonRates,
    TritonScrape,
)
from tritonwatch.scrape import triton_families as families

_MICROSECONDS = 1e6


def _went_down(previous: Mapping[str, float], current: Mapping[str, float]) -> bool:
    return any(name in previous and value < previous[name] for name, value in current.items())


def model_was_reset(previous: ModelCounters, current: ModelCounters) -> bool:
    """True when any counter of the model went down between the two scrapes."""
    return _went_down(previous.counters, current.counters) or _went_down(
        previous.failures_by_reason, current.failures_by_reason
    )


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when there is nothing to divide by."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def model_rates(
    previous: ModelCounters, current: ModelCounters, interval_seconds: float
) -> ModelRates:
    """Rates and averages of one model over ``interval_seconds`` between two scrapes.

    Request and queue time include requests answered from the response cache, the
    compute stages do not (Triton's definitions), so compute averages divide by the
    requests that were executed: successes minus cache hits, as perf_analyzer does.

    Raises:
        ValueError: ``interval_seconds`` is not positive.
    """
    if not interval_seconds > 0:
        raise ValueError(f"interval_seconds must be positive, got: {interval_seconds}")
    reset = model_was_reset(previous, current)

    def increase(name: str) -> float | None:
        return counter_increase(previous.counters.get(name), current.counters.get(name), reset)

    def per_second(name: str) -> float | None:
        return _ratio(increase(name), interval_seconds)

    requests = increase(families.REQUEST_SUCCESS)
    cache_hits = increase(families.CACHE_HITS) or 0.0
    executed = None if requests is None else requests - cache_hits
    averages = {
        stage: _ratio(increase(family), requests if stage in ("request", "queue") else executed)
        for stage, family in families.STAGE_DURATION_FAMILIES.items()
    }
    by_reason = {
        reason: counter_increase(previous.failures_by_reason.get(reason), value, reset)
        for reason, value in current.failures_by_reason.items()
    }
    return ModelRates(
        model=current.model,
        version=current.version,
        interval_seconds=interval_seconds,
        counters_reset=reset,
        requests_per_second=per_second(families.REQUEST_SUCCESS),
        inferences_per_second=per_second(families.INFERENCE_COUNT),
        executions_per_second=per_second(families.EXEC_COUNT),
        failures_per_second=per_second(families.REQUEST_FAILURE),
        failures_per_second_by_reason=MappingProxyType(
            {r: v / interval_seconds for r, v in by_reason.items() if v is not None}
        ),
        batch_size_average=_ratio(
            increase(families.INFERENCE_COUNT), increase(families.EXEC_COUNT)
        ),
        request_seconds_average=_seconds(averages["request"]),
        queue_seconds_average=_seconds(averages["queue"]),
        compute_input_seconds_average=_seconds(averages["compute_input"]),
        compute_infer_seconds_average=_seconds(averages["compute_infer"]),
        compute_output_seconds_average=_seconds(averages["compute_output"]),
        pending_requests=current.gauges.get(families.PENDING_REQUESTS),
        cache=cache_rates(increase, interval_seconds),
    )


def cache_rates(
    increase: Callable[[str], float | None], interval_seconds: float
) -> CacheRates | None:
    """The response cache's hits, misses and their mean durations over the interval.

    ``increase`` gives a counter family's increase (None when the page lacks it). None
    unless the page prints both the hit and the miss counter of the model: Triton 23.03+
    prints them for models with ``response_cache { enable: true }`` on a server with a
    cache; servers before 23.03 printed ``nv_cache_num_hits_per_model`` (0) for every
    model and no miss counter (tests/fixtures/triton_metrics sample_05/06), which says
    nothing about a cache.
    """
    hits, misses = increase(families.CACHE_HITS), increase(families.CACHE_MISSES)
    if hits is None or misses is None:
        return None
    return CacheRates(
        hits_per_second=hits / interval_seconds,
        misses_per_second=misses / interval_seconds,
        hit_ratio=_ratio(hits, hits + misses),
        hit_seconds_average=_seconds(_ratio(increase(families.CACHE_HIT_DURATION_US), hits)),
        miss_seconds_average=_seconds(_ratio(increase(families.CACHE_MISS_DURATION_US), misses)),
    )


def _seconds(microseconds: float | None) -> float | None:
    return None if microseconds is None else microseconds / _MICROSECONDS


def gpu_rates(
    gpu_uuid: str,
    previous: Mapping[str, float],
    current: Mapping[str, float],
    interval_seconds: float,
) -> TritonGpuRates:
    """One GPU's latest DCGM gauges from Triton, and its mean power from the energy counter.

    Raises:
        ValueError: ``interval_seconds`` is not positive.
    """
    if not interval_seconds > 0:
        raise ValueError(f"interval_seconds must be positive, got: {interval_seconds}")
    energy = current.get(families.GPU_ENERGY_JOULES)
    joules = counter_increase(previous.get(families.GPU_ENERGY_JOULES), energy, reset=False)
    return TritonGpuRates(
        gpu_uuid=gpu_uuid,
        interval_seconds=interval_seconds,
        utilization_ratio=current.get(families.GPU_UTILIZATION),
        memory_used_bytes=current.get(families.GPU_MEMORY_USED_BYTES),
        memory_total_bytes=current.get(families.GPU_MEMORY_TOTAL_BYTES),
        power_watts=current.get(families.GPU_POWER_USAGE_WATTS),
        power_limit_watts=current.get(families.GPU_POWER_LIMIT_WATTS),
        energy_joules=energy,
        energy_watts=_ratio(joules, interval_seconds),
    )


def triton_rates(previous: TritonScrape, current: TritonScrape) -> TritonRates:
    """Everything that happened between two scrapes of one server.

    Args:
        previous: the earlier scrape of the target.
        current: the later scrape of the same target.

    Raises:
        ValueError: ``current`` was not taken after ``previous``.
    """
    interval = current.at - previous.at
    if not interval > 0:
        raise ValueError(
            f"the current scrape must come after the previous one, got: {interval} s apart"
        )
    models = {
        key: model_rates(previous.models[key], current.models[key], interval)
        for key in current.models
        if key in previous.models
    }
    gpus = {
        uuid: gpu_rates(uuid, previous.gpus[uuid], current.gpus[uuid], interval)
        for uuid in current.gpus
        if uuid in previous.gpus
    }
    return TritonRates(interval, MappingProxyType(models), MappingProxyType(gpus))
