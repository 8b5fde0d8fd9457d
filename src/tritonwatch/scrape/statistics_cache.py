"""The response cache from the statistics API: ``inference_stats.cache_hit`` and
``cache_miss`` between two reads of one model.

The statistics API prints ``{count, ns}`` per model where ``/metrics`` prints the
``nv_cache_*_per_model`` families (µs): the same counts, the durations nearly so
(Triton 2.51 after two misses of the ``cached`` test model: 71 µs here, 66 µs on the
page). The arithmetic is :func:`~tritonwatch.scrape.triton_deltas.cache_rates`', so a
ratio or a mean time means the same whichever source gave it.

Unlike ``/metrics``, which prints the families only for a model with a cache, the
statistics API prints ``cache_hit`` and ``cache_miss`` for every model, ``{0, 0}``
without a cache (Triton 2.51). Zeros alone therefore say nothing: a model has cache
readings from here when its config enables ``response_cache`` or its statistics have
counted a lookup since it was loaded. Which source a model's readings come from is
:attr:`~tritonwatch.records.target_state.ModelState.cache`'s choice (``/metrics``
wins when both are there).
"""

from __future__ import annotations

from tritonwatch.records.counters import counter_increase
from tritonwatch.records.observations import CacheRates, ModelStatistics
from tritonwatch.scrape import triton_families as families
from tritonwatch.scrape.triton_deltas import cache_rates

_NS_PER_US = 1e3


def counted_lookups(stats: ModelStatistics) -> bool:
    """True when the model's statistics have counted a cache hit or miss since it was
    loaded: the model has a response cache, whatever its config says."""
    return stats.cache_hits + stats.cache_misses > 0


def statistics_cache_rates(
    previous: ModelStatistics,
    current: ModelStatistics,
    interval_seconds: float,
    reset: bool,
    *,
    response_cache: bool,
) -> CacheRates | None:
    """The cache's hits, misses and their mean times between two reads.

    Args:
        previous, current: two reads of one model, ``interval_seconds`` apart.
        reset: the statistics restarted in between (a count went down): increases are
            taken from zero, as for every other statistics rate.
        response_cache: the model's config enables ``response_cache`` (False where the
            config is unknown).

    Returns:
        None when ``response_cache`` is False and ``current`` has counted no lookup
        (:func:`counted_lookups`); else the rates, with a None ratio and None times for
        a window without lookups, as from ``/metrics``.
    """
    if not response_cache and not counted_lookups(current):
        return None
    totals = {
        families.CACHE_HITS: (previous.cache_hits, current.cache_hits),
        families.CACHE_MISSES: (previous.cache_misses, current.cache_misses),
        families.CACHE_HIT_DURATION_US: (
            previous.cache_hit_ns / _NS_PER_US,
            current.cache_hit_ns / _NS_PER_US,
        ),
        families.CACHE_MISS_DURATION_US: (
            previous.cache_miss_ns / _NS_PER_US,
            current.cache_miss_ns / _NS_PER_US,
        ),
    }

    def increase(family: str) -> float | None:
        before, after = totals[family]
        return counter_increase(before, after, reset)

    return cache_rates(increase, interval_seconds)
