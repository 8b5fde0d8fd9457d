"""A pipeline's time step by step, and the step that limits it (docs/design.md §4b, §7).

Triton's own numbers for an ensemble hide where its time goes: its queue is about 0, its
``compute_*`` are the sum of its steps' compute, and the steps' queue time lands in no
field of the ensemble — so a pipeline whose middle step waits 20 ms for a batch reads as
20 ms of ``server_other`` and "balanced". A BLS model's ``compute_infer`` is timed around
its whole ``execute()``, waits on its children included. This module reads the steps'
own averages instead, as perf_analyzer's "Composing models:" section does:

* :func:`step_breakdown`: for each step (a model that executes, nested ensembles
  flattened, :mod:`~tritonwatch.analysis.pipeline_shape`), its queue, compute_input,
  compute_infer, compute_output and other time per *pipeline* request — the step's
  per-request average × its calls per pipeline request — then the pipeline's own queue
  and what is left of its request time (``own``: an ensemble's hand-offs, a BLS
  model's own Python). Steps on parallel branches overlap, so their sum may exceed the
  request: ``parallel`` says so and ``own`` is then 0.
* :func:`step_bottleneck`: the one part that dominates the pipeline's latency — a step's
  queue, compute or I/O, the pipeline's own queue or (BLS) own Python, or the network —
  named with its step ("core's queue takes 65% of 31.0 ms per request").
* :func:`with_step_breakdowns`: every watched pipeline of a judged target with both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from tritonwatch.analysis.pipeline_shape import (
    PipelineShape,
    Reading,
    calls_per_request,
    pipeline_shapes,
)
from tritonwatch.records.target_state import (
    Bottleneck,
    BottleneckKind,
    ModelState,
    StepBreakdown,
    StepTime,
    TargetState,
)

PARALLEL_TOLERANCE = 1.2
"""Steps adding up to more than this × the request ran (partly) in parallel. Below it the
excess is the averages' own noise: a step's average covers all its callers (its other
pipelines, our canary on it), whose requests wait and batch a little differently."""


def step_breakdown(
    parent: str,
    shapes: Mapping[str, PipelineShape],
    readings: Mapping[str, Reading],
    canary_rps: Mapping[str, float],
) -> StepBreakdown | None:
    """The step breakdown of watched pipeline ``parent`` over one window; None when it is
    no pipeline or completed no request in the window.

    Args:
        shapes: every watched pipeline of the target (:func:`pipeline_shapes`).
        readings: the window's readings of every model, watched or composing.
        canary_rps: our canary's requests/s on each watched model over the window.
    """
    shape = shapes.get(parent)
    reading = readings.get(parent, Reading())
    if shape is None or reading.request is None:
        return None
    steps: list[StepTime] = []
    missing: list[str] = []
    for name, _ in shape.steps:
        step = readings.get(name, Reading())
        calls, estimated = calls_per_request(parent, name, shapes, readings, canary_rps)
        if step.request is None or calls is None:
            missing.append(name)
            continue
        stages = [step.queue, step.compute_input, step.compute_infer, step.compute_output]
        queue, c_in, c_infer, c_out = (value or 0.0 for value in stages)
        other = max(0.0, step.request - queue - c_in - c_infer - c_out)
        steps.append(
            StepTime(
                name,
                calls,
                estimated,
                queue * calls,
                c_in * calls,
                c_infer * calls,
                c_out * calls,
                other * calls,
            )
        )
    own_queue = reading.queue or 0.0
    inside = own_queue + sum(step.total for step in steps)
    return StepBreakdown(
        kind=shape.kind,
        steps=tuple(steps),
        request_seconds=reading.request,
        queue=own_queue,
        own=max(0.0, reading.request - inside),
        parallel=inside > reading.request * PARALLEL_TOLERANCE,
        missing=tuple(missing),
    )


@dataclass(frozen=True, slots=True)
class _Part:
    label: str
    kind: BottleneckKind | None
    step: str
    seconds: float


def _parts(parent: str, breakdown: StepBreakdown, network: float | None) -> list[_Part]:
    """Every part of the pipeline's time a bottleneck can be, in tie-break order."""
    parts: list[_Part] = []
    for step in breakdown.steps:
        calls = "" if step.calls == 1 else f" (×{step.calls:.2g} per request"
        if calls:
            calls += ", estimated)" if step.calls_estimated else ")"
        io = step.compute_input + step.compute_output
        parts += [
            _Part(f"{step.step}'s queue{calls}", "queue-bound", step.step, step.queue),
            _Part(
                f"{step.step}'s compute_infer{calls}",
                "compute-bound",
                step.step,
                step.compute_infer,
            ),
            _Part(
                f"{step.step}'s compute_input + compute_output{calls}", "io-bound", step.step, io
            ),
        ]
    parts.append(_Part(f"{parent}'s own queue", "queue-bound", "", breakdown.queue))
    bls = breakdown.kind == "bls"
    # With a step unread, the remainder holds that step's time too: nobody's to name.
    own_kind: BottleneckKind | None = "compute-bound" if bls and not breakdown.missing else None
    own_label = "own Python" if bls else "own hand-offs"
    if breakdown.missing:
        own_label = f"own time (with {', '.join(breakdown.missing)}, not read)"
    parts.append(_Part(f"{parent}'s {own_label}", own_kind, "", breakdown.own))
    if network is not None:
        parts.append(_Part("network_client", "network-bound", "", network))
    return parts


def step_bottleneck(
    parent: str,
    breakdown: StepBreakdown,
    network_seconds: float | None,
    *,
    shares: Mapping[str, float],
    dominant_share: float = 0.5,
    min_stage_seconds: float = 0.0,
) -> Bottleneck:
    """The part of the pipeline's time that dominates it, or ``balanced``.

    The rule of :func:`~tritonwatch.analysis.breakdown.find_bottleneck`, over the
    pipeline's parts: total = the request time plus ``network_seconds`` (the canary's
    end to end, when known; None for decoupled models). The largest part wins when its
    share of the total is over ``dominant_share`` and it is at least
    ``min_stage_seconds`` long; its kind is its stage's (a step's queue is queue-bound,
    its compute_infer compute-bound, its compute_input + compute_output io-bound; a BLS
    model's own Python is compute-bound); an ensemble's own hand-offs, a step's
    ``other``, and the remainder of a pipeline with a step not read (it holds that
    step's time too) belong to no kind. ``shares`` are kept as given (the pipeline's own
    breakdown's, as exported).
    """
    total = breakdown.request_seconds + (network_seconds or 0.0)
    frozen = MappingProxyType(dict(shares))
    parts = _parts(parent, breakdown, network_seconds)
    if total <= 0:
        return Bottleneck("balanced", frozen, "no time was measured in any part")
    best = max(parts, key=lambda part: part.seconds)  # the first of equals wins
    share = best.seconds / total
    parallel = (
        " (steps on parallel branches overlap: their times add up to more than the request)"
        if breakdown.parallel
        else ""
    )
    described = f"{best.label} takes {share:.0%} of {total * 1e3:.1f} ms per request"
    if best.kind is None:
        reason = f"the largest part, {described}, is no stage a setting shortens{parallel}"
        return Bottleneck("balanced", frozen, reason)
    if share <= dominant_share:
        return Bottleneck(
            "balanced",
            frozen,
            f"no part dominates: the largest, {described}, is not over "
            f"{dominant_share:.0%}{parallel}",
        )
    if best.seconds < min_stage_seconds:
        return Bottleneck(
            "balanced",
            frozen,
            f"{described}, but {best.seconds * 1e3:.1f} ms is under the "
            f"{min_stage_seconds * 1e3:.1f} ms worth acting on{parallel}",
        )
    reason = f"{described} (over {dominant_share:.0%}){parallel}"
    return Bottleneck(best.kind, frozen, reason, best.step)


def target_readings(state: TargetState) -> tuple[dict[str, Reading], dict[str, float]]:
    """The last scrape window's readings of every model of ``state`` (watched and
    composing), and our canary's requests/s on each watched model."""
    readings = {
        name: Reading.of_rates(model.rates)
        for name, model in (*state.composing.items(), *state.models.items())
    }
    canary = {
        name: model.canary_requests_per_second
        for name, model in state.models.items()
        if model.canary_requests_per_second is not None
    }
    return readings, canary


def with_step_breakdowns(
    state: TargetState, thresholds: Mapping[str, tuple[float, float]]
) -> TargetState:
    """``state`` (each model already judged on its own) with every watched pipeline's
    step breakdown, and its bottleneck judged over its steps.

    Args:
        thresholds: model → (dominant share, minimum seconds) of its bottleneck rule;
            (0.5, 0) for a model not in it.
    """
    shapes = pipeline_shapes(state)
    if not shapes:
        return state
    readings, canary = target_readings(state)
    models = dict(state.models)
    for name in shapes:
        breakdown = step_breakdown(name, shapes, readings, canary)
        model = models[name]
        if breakdown is None:
            continue
        models[name] = _judged(name, model, breakdown, thresholds.get(name, (0.5, 0.0)))
    return replace(state, models=models)


def _judged(
    name: str, model: ModelState, breakdown: StepBreakdown, limits: tuple[float, float]
) -> ModelState:
    own = model.breakdown
    shares = model.bottleneck.shares if model.bottleneck is not None else {}
    network = own.network_client if own is not None else None
    neck = step_bottleneck(
        name,
        breakdown,
        network,
        shares=shares,
        dominant_share=limits[0],
        min_stage_seconds=limits[1],
    )
    return replace(model, steps=breakdown, bottleneck=neck)
