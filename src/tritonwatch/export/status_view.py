"""The status page's view model, assembled from the latest records and verdicts.

Pure: the daemon hands in what it holds (the effective config, readiness, judged scrape
states, sweeps, the canary's series, SLO statuses, recommendations, experiments, the
p95 history, the streaming canary's series) and gets the
:class:`~tritonwatch.export.status_page.StatusSnapshot` that
:func:`~tritonwatch.export.status_page.render_status_page` draws. One row per canary
series of a model still watched; a streamed series' row carries its TTFT, ITL and tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tritonwatch.analysis.advisor_records import Recommendation
from tritonwatch.analysis.experiments import Experiment
from tritonwatch.analysis.serving import NotServing
from tritonwatch.analysis.slo import SLOStatus
from tritonwatch.config.schema import Config, WatchedModel
from tritonwatch.export.p95_history import P95Point
from tritonwatch.export.pipeline_view import cache_line, steps_line
from tritonwatch.export.status_capacity import capacity_fragments
from tritonwatch.export.status_page import (
    AdviceLine,
    ClientShare,
    ModelStatus,
    SloLine,
    StatusSnapshot,
    StreamStatus,
    VerdictLine,
)
from tritonwatch.export.sweep_report import render_svg
from tritonwatch.records.capacity_records import CapacityReading, DesiredReplicas
from tritonwatch.records.observations import ReadinessObservation, TargetModel
from tritonwatch.records.sweep_records import SweepResult
from tritonwatch.records.target_state import ModelState, TargetState
from tritonwatch.state.canary_board import SeriesKey, SeriesSnapshot
from tritonwatch.state.stream_board import StreamSnapshot

EXPERIMENTS_SHOWN = 5
"""The latest verdicts shown per model."""
WINDOW = "5m"
"""The quantile window the page shows, for requests and streams alike."""


@dataclass(frozen=True, slots=True)
class StatusInputs:
    """Everything the status page shows, as of one request."""

    config: Config
    """The effective config: the models watched and their budgets."""
    canary: Sequence[SeriesSnapshot]
    readiness: Mapping[str, ReadinessObservation]
    triton: Iterable[TargetState]
    """Every target's scraped state with its verdicts (the bottleneck board's)."""
    sweeps: Mapping[TargetModel, tuple[SweepResult, float]]
    slo_statuses: Iterable[SLOStatus]
    advice: Mapping[TargetModel, list[Recommendation]]
    experiments: Iterable[Experiment]
    p95_history: Callable[[SeriesKey], tuple[P95Point, ...]]
    healthy: bool
    streams: Sequence[StreamSnapshot] = ()
    """The streaming canaries' TTFT/ITL series (:meth:`StreamBoard.snapshot`)."""
    not_serving: Sequence[NotServing] = ()
    """The models of ready servers that fail every canary request (the latest evaluation)."""
    advice_blocked: Mapping[TargetModel, str] = field(default_factory=dict)
    """Why a burning, bottlenecked model has no recommendation (its reason)."""
    capacity: Sequence[CapacityReading] = ()
    """Every watched model's capacity reading (the capacity board's)."""
    replicas: Sequence[DesiredReplicas] = ()
    """The desired replicas of every (service, model) with a capacity."""
    wall_time: float | None = None
    """Unix seconds as of the request: dates the capacity's age (None: not shown)."""


def status_snapshot(inputs: StatusInputs) -> StatusSnapshot:
    """One row per canary series of a watched model, in the canary's order."""
    config = inputs.config
    models = {(t.name, m.name): m for t in config.targets for m in t.models}
    triton = {state.target: state for state in inputs.triton}
    slos: dict[TargetModel, list[SloLine]] = {}
    for status in inputs.slo_statuses:
        slos.setdefault((status.spec.target, status.spec.model), []).append(SloLine.of(status))
    verdicts: dict[TargetModel, list[VerdictLine]] = {}
    for experiment in inputs.experiments:
        verdicts.setdefault((experiment.target, experiment.model), []).append(
            VerdictLine(experiment.parameter, experiment.verdict, experiment.reason)
        )
    streams = {(s.target, s.model, s.protocol): s for s in inputs.streams}
    not_serving = {(v.target, v.model): v for v in inputs.not_serving}
    capacity = capacity_fragments(inputs.capacity, inputs.replicas, config, inputs.wall_time)
    rows = []
    for series in inputs.canary:
        key = (series.target, series.model)
        watched = models.get(key)
        if watched is None:
            continue
        observation = inputs.readiness.get(series.target)
        sweep = inputs.sweeps.get(key)
        target_state = triton.get(series.target)
        model_state = target_state.models.get(series.model) if target_state else None
        breakdown = model_state.breakdown if model_state else None
        rows.append(
            ModelStatus(
                target=series.target,
                model=series.model,
                protocol=series.protocol,
                up=observation.ready if observation else None,
                budget_seconds=_latency_budget(config, series, watched, streams),
                quantiles=_named(series.window_quantiles.get(WINDOW, {})),
                outcomes=series.outcomes,
                sweep_svg=render_svg(sweep[0]) if sweep else None,
                breakdown=breakdown.stages() if breakdown else None,
                bottleneck=_bottleneck_kind(model_state),
                slos=slos.get(key, []),
                recommendations=[AdviceLine.of(r) for r in inputs.advice.get(key, [])],
                advice_blocked=inputs.advice_blocked.get(key),
                experiments=verdicts.get(key, [])[-EXPERIMENTS_SHOWN:],
                last_error=series.last_error,
                client_share=ClientShare.of(breakdown),
                p95_history=inputs.p95_history((series.target, series.model, series.protocol)),
                stream=_stream_status(streams.get((series.target, series.model, series.protocol))),
                not_serving=not_serving.get(key),
                input_refused=series.input_refused,
                steps=steps_line(model_state),
                cache=cache_line(model_state),
                capacity_html=capacity.get(key),
            )
        )
    return StatusSnapshot(rows, inputs.healthy)


def _latency_budget(
    config: Config,
    series: SeriesSnapshot,
    model: WatchedModel,
    streams: Mapping[tuple[str, str, str], StreamSnapshot],
) -> float | None:
    """The latency SLO's threshold, or None where none judges the model: a streamed one
    (its series on the stream board, or a canary that surely streams) without a written
    ``slo.latency``, as :func:`~tritonwatch.analysis.slo.slo_specs` has it."""
    target = next(t for t in config.targets if t.name == series.target)
    streamed = (series.target, series.model, series.protocol) in streams
    streams_surely = config.canary_for(target, model).streams_surely
    latency = config.slo_for(model).judged(streamed or streams_surely).latency
    return None if latency is None else latency.threshold


def _bottleneck_kind(state: ModelState | None) -> str | None:
    return state.bottleneck.kind if state is not None and state.bottleneck is not None else None


def _named(window: Mapping[float, float]) -> dict[str, float]:
    """Quantile → value as the page names them: 0.95 → ``p95``."""
    return {f"p{q * 100:g}": v for q, v in window.items()}


def _stream_status(snapshot: StreamSnapshot | None) -> StreamStatus | None:
    if snapshot is None:
        return None
    return StreamStatus(
        {m: _named(w.get(WINDOW, {})) for m, w in snapshot.window_quantiles.items()},
        snapshot.output_tokens_per_second.get(WINDOW),
        snapshot.output_tokens,
    )
