"""Where a request's time goes, and which stage limits a model (docs/design.md §7).

Pure functions: a latency breakdown from one model's Triton averages over a window and
the canary's end-to-end mean over the same window, and a bottleneck finding from the
breakdown. The wiring judges every target's state once after each scrape
(:func:`judge_target`); the exporter, the evaluator and the status page read the verdicts.

Stages, in seconds per request (averages over the window):

* ``queue``, ``compute_input``, ``compute_infer``, ``compute_output`` — Triton's own
  stage timers (Δduration / Δrequests).
* ``server_other`` — request time minus those four: time inside Triton but outside
  its stage timers (frontend, response cache, ensemble hand-offs). Clamped at 0,
  because the compute stages are averaged over executed requests only and the request
  time over all requests, so rounding (or cache hits) can make the four exceed it.
* ``network_client`` — the canary's mean end-to-end latency minus Triton's mean request
  time: network, serialisation and client time, which Triton cannot see. None without
  canary data; clamped at 0. It is an estimate: Triton's mean covers *all* requests in
  the window, the canary's only its own, so on a server with other traffic of another
  shape (larger batches) the difference is approximate. The canary's own send lateness
  (its thread woke after the intended time) is not in it: the canary's latency starts
  when its thread took the request up, and the lateness is exported apart
  (``tritonwatch_canary_send_lateness_seconds``), so a busy client host never reads as
  a slow network. Always None for a **decoupled** model: Triton's request time ends when
  ``execute()`` hands its responses to the stream, while the client's time runs to the
  last response, so end to end minus server is the model's own streaming — time to first
  response, the responses sent after, the gaps between them — not network. What shows it
  instead is the streaming canary's time to first token and gaps
  (``tritonwatch_stream_*``) and Triton's first-response histogram.

A pipeline (an ensemble, or a BLS model with ``composing_models``) also gets its step
breakdown, and its bottleneck is judged over its steps
(:mod:`~tritonwatch.analysis.pipeline_breakdown`): its own numbers hide its steps' queues.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from tritonwatch.analysis.pipeline_breakdown import with_step_breakdowns
from tritonwatch.config.schema import Config, TargetConfig
from tritonwatch.records.observations import ModelRates
from tritonwatch.records.target_state import (
    Bottleneck,
    BottleneckKind,
    LatencyBreakdown,
    ModelState,
    TargetState,
)

BOTTLENECK_BUDGET_SHARE = 0.2
"""A bottleneck must take at least this share of the model's latency SLO threshold."""

BOTTLENECK_GROUPS: dict[BottleneckKind, tuple[str, ...]] = {
    "queue-bound": ("queue",),
    "compute-bound": ("compute_infer",),
    "io-bound": ("compute_input", "compute_output"),
    "network-bound": ("network_client",),
}
"""Each bottleneck kind and the stages whose shares add up to it, in tie-break order.
``server_other`` belongs to no kind: time nobody can attribute suggests no change."""


def latency_breakdown(
    rates: ModelRates, canary_mean_seconds: float | None = None, *, decoupled: bool = False
) -> LatencyBreakdown | None:
    """The breakdown of one model's window, or None when no request completed in it.

    Args:
        rates: the model's rates between two scrapes.
        canary_mean_seconds: the canary's mean end-to-end latency over the same window,
            or None when the canary sent nothing (or is off).
        decoupled: the model streams its responses (``network_client`` is then None: see
            the module docstring).
    """
    request = rates.request_seconds_average
    if request is None:
        return None
    # A stage missing while requests completed (all of them cache hits, or a server
    # that lacks the family) spent no measured time.
    queue = rates.queue_seconds_average or 0.0
    compute_input = rates.compute_input_seconds_average or 0.0
    compute_infer = rates.compute_infer_seconds_average or 0.0
    compute_output = rates.compute_output_seconds_average or 0.0
    inside = queue + compute_input + compute_infer + compute_output
    network = None if canary_mean_seconds is None else max(0.0, canary_mean_seconds - request)
    if decoupled:
        network = None
    return LatencyBreakdown(
        queue=queue,
        compute_input=compute_input,
        compute_infer=compute_infer,
        compute_output=compute_output,
        server_other=max(0.0, request - inside),
        network_client=network,
        server_seconds=request,
        end_to_end_seconds=canary_mean_seconds,
    )


@dataclass(frozen=True, slots=True)
class BottleneckThresholds:
    """When one stage group is *the* bottleneck.

    Args:
        dominant_share: the group's share of the total must exceed this. At least 0.5,
            so that at most one group can win.
        min_stage_seconds: and the group's time must reach this many seconds, so that a
            fast model whose latency is mostly (tiny) compute is not called compute-bound:
            there is nothing worth winning there. :meth:`for_budget` derives it from the
            model's latency SLO.
    """

    dominant_share: float = 0.5
    min_stage_seconds: float = 0.0

    def __post_init__(self) -> None:
        if not 0.5 <= self.dominant_share < 1.0:
            raise ValueError(f"dominant_share must be in [0.5, 1), got: {self.dominant_share!r}")
        if not self.min_stage_seconds >= 0.0:
            raise ValueError(
                f"min_stage_seconds must not be negative, got: {self.min_stage_seconds!r}"
            )

    @classmethod
    def for_budget(
        cls,
        threshold_seconds: float,
        *,
        budget_share: float = 0.2,
        dominant_share: float = 0.5,
    ) -> BottleneckThresholds:
        """Thresholds for a model whose latency SLO threshold is ``threshold_seconds``:
        a bottleneck must take at least ``budget_share`` of that budget (10 ms of 50 ms)."""
        return cls(dominant_share, threshold_seconds * budget_share)


def find_bottleneck(
    breakdown: LatencyBreakdown, thresholds: BottleneckThresholds | None = None
) -> Bottleneck:
    """Names the stage group that dominates the breakdown, or ``balanced``.

    The rule:

    1. total = the sum of the known stages: the canary's end-to-end time when
       ``network_client`` is known, Triton's request time otherwise (or the four stage
       timers, when they add up to more). Each stage's share is its time over the total.
    2. Groups: queue-bound = queue; compute-bound = compute_infer; io-bound =
       compute_input + compute_output; network-bound = network_client (only with canary
       data). ``server_other`` belongs to none.
    3. The group with the largest share wins (ties: the order above) when its share is
       *strictly greater* than ``dominant_share`` and its time is at least
       ``min_stage_seconds``. Otherwise the model is ``balanced``: no single stage both
       dominates and matters, so no one change would help much.
    """
    limits = thresholds or BottleneckThresholds()
    stages = breakdown.stages()
    total = sum(stages.values())
    if total <= 0:
        shares = MappingProxyType(dict.fromkeys(stages, 0.0))
        return Bottleneck("balanced", shares, "no time was measured in any stage")
    shares = MappingProxyType({stage: value / total for stage, value in stages.items()})
    groups = {
        kind: (
            sum(shares.get(stage, 0.0) for stage in members),
            sum(stages.get(stage, 0.0) for stage in members),
        )
        for kind, members in BOTTLENECK_GROUPS.items()
        if all(stage in stages for stage in members)
    }
    kind, (share, seconds) = max(groups.items(), key=lambda item: item[1][0])
    described = f"{_name(kind)} takes {share:.0%} of {total * 1e3:.1f} ms per request"
    if share <= limits.dominant_share:
        return Bottleneck(
            "balanced",
            shares,
            f"no stage dominates: the largest, {described}, is not over "
            f"{limits.dominant_share:.0%}",
        )
    if seconds < limits.min_stage_seconds:
        return Bottleneck(
            "balanced",
            shares,
            f"{described}, but {seconds * 1e3:.1f} ms is under the "
            f"{limits.min_stage_seconds * 1e3:.1f} ms worth acting on",
        )
    return Bottleneck(kind, shares, f"{described} (over {limits.dominant_share:.0%})")


def _name(kind: BottleneckKind) -> str:
    """The stages of a kind as a reader says them: ``compute_input + compute_output``."""
    return " + ".join(BOTTLENECK_GROUPS[kind])


def bottleneck_thresholds(config: Config, target: TargetConfig) -> dict[str, BottleneckThresholds]:
    """Each model's thresholds: a bottleneck must be worth 20 % of its latency budget."""
    return {
        model.name: BottleneckThresholds.for_budget(
            config.slo_for(model).latency.threshold, budget_share=BOTTLENECK_BUDGET_SHARE
        )
        for model in target.models
    }


def judge_model(state: ModelState, thresholds: BottleneckThresholds | None = None) -> ModelState:
    """``state`` with its breakdown and bottleneck: both None when no request completed."""
    decoupled = state.config is not None and state.config.traits.decoupled
    breakdown = (
        latency_breakdown(state.rates, state.canary_mean_seconds, decoupled=decoupled)
        if state.rates is not None
        else None
    )
    bottleneck = find_bottleneck(breakdown, thresholds) if breakdown is not None else None
    return replace(state, breakdown=breakdown, bottleneck=bottleneck)


def judge_target(
    state: TargetState, thresholds: Mapping[str, BottleneckThresholds] | None = None
) -> TargetState:
    """Every model of a scraped target with its breakdown and bottleneck (by model name;
    default thresholds for a model not in ``thresholds``), and every pipeline with its
    step breakdown and a bottleneck judged over its steps."""
    limits = thresholds or {}
    models = {name: judge_model(model, limits.get(name)) for name, model in state.models.items()}
    steps = {name: (t.dominant_share, t.min_stage_seconds) for name, t in limits.items()}
    return with_step_breakdowns(replace(state, models=models), steps)
