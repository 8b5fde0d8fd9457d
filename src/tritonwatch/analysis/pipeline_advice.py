"""Advice for pipelines: the change goes to the step that makes the pipeline slow.

An ensemble has no instances, no batcher and no compute of its own, and a BLS model's
compute includes waiting on its children, so the advisor's rules read the wrong numbers
on either. :func:`advise_pipeline` replaces :func:`~tritonwatch.analysis.advisor.advise`
for a watched pipeline (an ensemble, or a model with ``composing_models``):

1. its step breakdown over the advisor window
   (:func:`~tritonwatch.analysis.pipeline_breakdown.step_breakdown`, the steps' own
   window averages) and the part that dominates it
   (:func:`~tritonwatch.analysis.pipeline_breakdown.step_bottleneck`);
2. when the pipeline's p95 is over its budget and that part is a step's queue, compute
   or I/O, the step's rules for that kind run on the step's own numbers and config, with
   the pipeline's p95 and budget: a queue-bound step gets ``max_queue_delay_microseconds``
   lowered (or dynamic batching, or an instance), a compute-bound one optimisation (never
   for ``backend: python``), an I/O-bound one fewer copies. The recommendation's
   ``model`` is the step, its ``pipeline`` the watched model whose SLO it serves, and its
   reason names both;
3. the pipeline's own advice: for an ensemble only what its own numbers can say
   (network, refused requests); for a BLS model every rule, with its ``compute_infer``
   reduced to its own share (its children's time taken out);
4. one configuration change at a time: a step's change goes first, and the pipeline's
   own configuration change waits for it.

How the same step's advice from two sources (a pipeline's, the step's own canary) is
shown once: :class:`~tritonwatch.runtime.recommendation_board.RecommendationBoard`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from tritonwatch.analysis.advisor import advise
from tritonwatch.analysis.advisor_evidence import HOST_CPU
from tritonwatch.analysis.advisor_records import (
    Action,
    AdvisorInput,
    AdvisorThresholds,
    Recommendation,
    with_server_window,
)
from tritonwatch.analysis.breakdown import BOTTLENECK_BUDGET_SHARE
from tritonwatch.analysis.pipeline_breakdown import step_bottleneck, step_breakdown
from tritonwatch.analysis.pipeline_shape import Reading, pipeline_shape, pipeline_shapes
from tritonwatch.records.observations import ModelRates
from tritonwatch.records.target_state import (
    BottleneckKind,
    ModelState,
    StepBreakdown,
    TargetState,
    model_gpus,
)

STEP_ACTIONS: dict[BottleneckKind, frozenset[Action]] = {
    "queue-bound": frozenset(
        {Action.LOWER_QUEUE_DELAY, Action.ENABLE_DYNAMIC_BATCHING, Action.ADD_INSTANCE}
    ),
    "compute-bound": frozenset({Action.OPTIMIZE_MODEL, Action.ADD_INSTANCE}),
    "io-bound": frozenset({Action.REDUCE_IO}),
}
"""The rules that may run on a step, by the kind of the part of it that dominates."""

ENSEMBLE_OWN_ACTIONS: frozenset[Action] = frozenset(
    {Action.REDUCE_NETWORK_OVERHEAD, Action.TUNE_QUEUE_POLICY}
)
"""An ensemble's own advice: its queue and compute are its steps', so only the network
between client and server and the requests it refused are its own."""


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def with_serving(
    model: AdvisorInput, model_state: ModelState | None, state: TargetState
) -> AdvisorInput:
    """``model`` with what a step's loaded config and its server say (as
    :func:`~tritonwatch.analysis.advisor_evidence.advisor_input_for` reads them for a
    watched model): batching, instances, their kind and GPUs, the host CPU, Python."""
    cfg = model_state.config if model_state is not None else None
    groups = cfg.instance_groups if cfg is not None else ()
    kinds = {group.kind for group in groups}
    kind = kinds.pop() if len(kinds) == 1 else None
    on_gpus = [] if kind == "KIND_CPU" else list(state.gpus.values())
    gpus = model_gpus(on_gpus, (i for g in groups for i in g.gpus)) if on_gpus else []
    batcher = cfg.dynamic_batching if cfg is not None else None
    return replace(
        model,
        max_batch_size=cfg.max_batch_size if cfg is not None else None,
        dynamic_batching=None if cfg is None else batcher is not None,
        max_queue_delay_microseconds=batcher.max_queue_delay_microseconds if batcher else None,
        instance_count=sum(g.instances for g in groups) if cfg is not None else None,
        gpu_utilization=_mean([g.utilization_ratio for g in gpus]),
        gpu_memory_used_bytes=_mean([g.memory_used_bytes for g in gpus]),
        gpu_memory_total_bytes=_mean([g.memory_total_bytes for g in gpus]),
        instance_kind=kind,
        host_cpu_utilization=state.server.get(HOST_CPU),
        python_backend=cfg is not None and cfg.traits.python_backend,
    )


def _reading(model: AdvisorInput) -> Reading:
    return Reading(
        model.request_seconds,
        model.queue_seconds,
        model.compute_input_seconds,
        model.compute_infer_seconds,
        model.compute_output_seconds,
        model.requests_per_second,
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def window_breakdown(
    parent: AdvisorInput, state: TargetState, windows: Mapping[str, Sequence[ModelRates]]
) -> StepBreakdown | None:
    """The pipeline's step breakdown over the advisor window: ``parent`` carries its own
    window averages, ``windows`` every other model's rates over the same window."""
    shapes = pipeline_shapes(state)
    readings = {
        name: _reading(with_server_window(AdvisorInput(parent.target, name, 0.0), rates))
        for name, rates in windows.items()
        if rates
    }
    readings[parent.model] = _reading(parent)
    canary = {
        name: model.canary_requests_per_second
        for name, model in state.models.items()
        if model.canary_requests_per_second is not None
    }
    return step_breakdown(parent.model, shapes, readings, canary)


def advise_pipeline(
    parent: AdvisorInput,
    thresholds: AdvisorThresholds,
    *,
    state: TargetState,
    windows: Mapping[str, Sequence[ModelRates]],
) -> list[Recommendation]:
    """The advice for watched model ``parent`` (its window averages already in), its
    steps' included; plain :func:`~tritonwatch.analysis.advisor.advise` for a model that
    is no pipeline. See the module docstring for the rule.

    Args:
        state: the target's latest scraped state (configs, composing models, the canary's
            rates on watched models).
        windows: each model's rates over the advisor window (watched and composing).
    """
    shape = pipeline_shape(parent.model, state)  # this model's only: linear in the fleet
    if shape is None:
        return advise(parent, thresholds)
    breakdown = window_breakdown(parent, state, windows)
    own_only = ENSEMBLE_OWN_ACTIONS if shape.kind == "ensemble" else None
    own = parent
    infer = parent.compute_infer_seconds
    if breakdown is not None and shape.kind == "bls" and not breakdown.missing and infer:
        children = sum(step.total for step in breakdown.steps)
        own = replace(parent, compute_infer_seconds=max(0.0, infer - children))
    steps = _step_advice(parent, breakdown, thresholds, state, windows) if breakdown else []
    advice = advise(own, thresholds, only=own_only)
    if any(r.config_change for r in steps):
        advice = [r for r in advice if not r.config_change]
    changes = [r for r in steps if r.config_change] + [r for r in advice if r.config_change]
    return changes + [r for r in steps + advice if not r.config_change]


def _step_advice(
    parent: AdvisorInput,
    breakdown: StepBreakdown,
    thresholds: AdvisorThresholds,
    state: TargetState,
    windows: Mapping[str, Sequence[ModelRates]],
) -> list[Recommendation]:
    """The dominant step's advice, when the pipeline's p95 is over its budget."""
    p95, budget = parent.p95_seconds, parent.latency_budget_seconds
    if p95 is None or p95 <= budget:
        return []
    network = None
    if not parent.streaming and parent.client_mean_seconds is not None:
        network = max(0.0, parent.client_mean_seconds - (parent.request_seconds or 0.0))
    neck = step_bottleneck(
        parent.model,
        breakdown,
        network,
        shares={},
        dominant_share=thresholds.dominant_share,
        min_stage_seconds=budget * BOTTLENECK_BUDGET_SHARE,
    )
    actions = STEP_ACTIONS.get(neck.kind)
    if not neck.step or actions is None:
        return []
    base = AdvisorInput(parent.target, neck.step, budget, p95_seconds=p95)
    step = with_serving(base, state.model_state(neck.step), state)
    step = with_server_window(step, windows.get(neck.step, ()))
    lead = f"{parent.model}'s p95 {_ms(p95)} is over its {_ms(budget)} budget and {neck.reason}"
    return [
        replace(
            r,
            pipeline=parent.model,
            reason=f"{lead}; in {neck.step}: {r.reason}",
            evidence=MappingProxyType({**r.evidence, "pipeline_p95_seconds": float(f"{p95:.6g}")}),
        )
        for r in advise(step, thresholds, only=actions)
    ]
