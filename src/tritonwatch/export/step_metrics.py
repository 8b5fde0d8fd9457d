"""A pipeline's time step by step, and each model's response cache, as metric families.

Rendered by :class:`~tritonwatch.export.triton_metrics.TritonModelCollector` from the
judged states (the step breakdown is the judgement's:
:mod:`~tritonwatch.analysis.pipeline_breakdown`):

* ``tritonwatch_model_step_latency_seconds{target,model,step,stage}`` — for a watched
  pipeline (``model``: an ensemble, or a BLS model with ``composing_models``), the mean
  time per pipeline request spent in each composing model (``step``) and stage (queue,
  compute_input, compute_infer, compute_output, other); the pipeline's own queue and its
  remainder (an ensemble's hand-offs, a BLS model's own Python) are ``step`` = the model
  itself, ``stage`` = ``queue`` and ``own``. A family of its own rather than a ``step``
  label on ``tritonwatch_model_latency_breakdown_seconds``: the breakdown's stages add up
  to the request, a pipeline's steps do not when branches run in parallel, and rules and
  dashboards that sum the breakdown must not count a step's time twice (it is already in
  the pipeline's ``server_other`` and compute stages).
* ``tritonwatch_model_step_calls{target,model,step}`` — the step's requests per pipeline
  request (an ensemble's count from its config; a BLS child's inferred from request rates).

The cache families are plain per-model gauges in
:mod:`~tritonwatch.export.triton_metrics` (:data:`CACHE_GAUGES`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from tritonwatch.records.observations import CacheRates
from tritonwatch.records.target_state import ModelState

STEP_LATENCY = "tritonwatch_model_step_latency_seconds"
STEP_CALLS = "tritonwatch_model_step_calls"

CacheRead = Callable[[CacheRates], float | None]

CACHE_GAUGES: tuple[tuple[str, str, CacheRead], ...] = (
    (
        "tritonwatch_model_cache_hit_ratio",
        "Response cache hits / (hits + misses) over the last scrape interval, from /metrics' "
        "per-model cache families, else the statistics API's cache_hit/cache_miss; absent "
        "for a model without a cache (cache off, Triton before 23.03) or without lookups.",
        lambda c: c.hit_ratio,
    ),
    (
        "tritonwatch_model_cache_hit_seconds",
        "Mean time of a response cache hit over the last scrape interval "
        "(nv_cache_hit_duration_per_model per hit, or the statistics API's cache_hit).",
        lambda c: c.hit_seconds_average,
    ),
    (
        "tritonwatch_model_cache_miss_seconds",
        "Mean time of a response cache miss, lookup plus inserting the new response, over "
        "the last scrape interval (nv_cache_miss_duration_per_model per miss, or the "
        "statistics API's cache_miss).",
        lambda c: c.miss_seconds_average,
    ),
)
"""(family, help, reading) of each cache gauge."""


def cache_value(read: CacheRead) -> Callable[[ModelState], float | None]:
    """A per-model gauge reading of the model's cache rates (None without them), from
    whichever source :attr:`~tritonwatch.records.target_state.ModelState.cache` chose."""

    def value(state: ModelState) -> float | None:
        cache = state.cache
        return read(cache) if cache is not None else None

    return value


def step_families(models: Iterable[tuple[str, ModelState]]) -> Iterator[Metric]:
    """The step latency and step calls families of every watched pipeline."""
    latency = GaugeMetricFamily(
        STEP_LATENCY,
        "Mean time per request of the pipeline (model) in each of its composing models "
        "(step) and stage over the last scrape interval; the pipeline's own queue and "
        "remainder are step=model, stage=queue|own. Steps on parallel branches overlap: "
        "do not sum steps (the breakdown family adds up to the request, this one need not).",
        labels=["target", "model", "step", "stage"],
    )
    calls = GaugeMetricFamily(
        STEP_CALLS,
        "Requests on the step per request of the pipeline: an ensemble's count from its "
        "config, a BLS child's inferred from request rates.",
        labels=["target", "model", "step"],
    )
    for target, model in models:
        steps = model.steps
        if steps is None:
            continue
        for step in steps.steps:
            calls.add_metric([target, model.model, step.step], step.calls)
            for stage, seconds in step.stages().items():
                latency.add_metric([target, model.model, step.step, stage], seconds)
        latency.add_metric([target, model.model, model.model, "queue"], steps.queue)
        latency.add_metric([target, model.model, model.model, "own"], steps.own)
    yield latency
    yield calls
