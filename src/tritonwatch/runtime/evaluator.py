"""Judgement in the daemon: SLO burn, recommendations, experiments, and their alerts.

The daemon's jobs feed observations in (:meth:`Evaluator.observe_scrape`), and every
``alerting.evaluation_interval`` :meth:`Evaluator.evaluate` turns them into findings:
burn rates per SLO, the advisor's recommendations per model, verdicts of experiments
opened by config changes, and the alerts all of these raise. It owns the notifiers.

It also reads the readiness board at each evaluation: a server not ready for a minute
raises ``TritonServerDown``, a ready server whose model fails every canary request for
``alerting.not_serving_for`` (a minute unless set) raises ``TritonModelNotServing``
(:mod:`tritonwatch.analysis.serving`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from prometheus_client.registry import CollectorRegistry

from tritonwatch.analysis.advice_blocked import blocked_reason
from tritonwatch.analysis.advisor_evidence import KvPressureLog, LlmWindows, advisor_input_for
from tritonwatch.analysis.advisor_records import (
    AdvisorThresholds,
    with_llm_window,
    with_server_window,
)
from tritonwatch.analysis.experiments import Experiment, experiment_span, judge_experiment
from tritonwatch.analysis.pipeline_advice import advise_pipeline
from tritonwatch.analysis.serving import NotServing, down_since, not_serving, servers_down
from tritonwatch.analysis.slo import SLOStatus, slo_specs
from tritonwatch.common.logs import get_logger
from tritonwatch.config.detail import Detail
from tritonwatch.config.schema import Config
from tritonwatch.config.slo_schema import stream_latency_warning
from tritonwatch.export.alerts import (
    AlertBoard,
    AlertSpec,
    active_alerts,
    not_serving_alert,
    server_down_alert,
)
from tritonwatch.export.capacity_alerts import capacity_alert, firing, held_since
from tritonwatch.export.experiment_metrics import (
    EXPERIMENT_ALERT_SECONDS,
    ExperimentCollector,
    experiment_alert,
)
from tritonwatch.export.notifiers import notifiers_for
from tritonwatch.export.p95_history import P95History
from tritonwatch.export.sli_metrics import SLIEventsCollector
from tritonwatch.export.slo_metrics import AlertDeliveryCollector, SLOCollector
from tritonwatch.records.capacity_records import CapacityReading
from tritonwatch.records.observations import (
    ModelConfigChange,
    ModelRates,
    ReadinessObservation,
    TargetModel,
)
from tritonwatch.records.target_state import BottleneckKind, ScrapeOutcome, TargetState
from tritonwatch.runtime.notifier_set import NotifierSet
from tritonwatch.runtime.recommendation_board import RecommendationBoard
from tritonwatch.runtime.slo_tracker import SLOTracker
from tritonwatch.scrape.triton_scrapers import TritonScrapers
from tritonwatch.state.canary_board import CanaryBoard, SeriesSnapshot
from tritonwatch.state.stream_board import StreamBoard, StreamSnapshot

_log = get_logger("evaluator")
SLO_STATE_FILE = "slo-events.json"
EXPERIMENT_HISTORY = 50


def _bottleneck(state: TargetState, model: str) -> BottleneckKind | None:
    """The model's bottleneck at the last scrape, as the scrape judged it (a pipeline's
    over its steps); read, never judged again here."""
    judged = state.models.get(model)
    return judged.bottleneck.kind if judged is not None and judged.bottleneck is not None else None


def _thresholds(config: Config) -> AdvisorThresholds:
    return AdvisorThresholds(**config.advisor.model_dump(exclude={"window", "experiment_window"}))


class Evaluator:
    """Evaluates the SLOs, the advice, experiments and alerts every evaluation interval,
    and owns the notifiers that send them.

    ``judged_states`` returns every target's judged state as the scrape published it
    (the bottleneck board's :meth:`~tritonwatch.runtime.bottleneck_board.BottleneckBoard.
    states`): the advisor's inputs and the bottleneck verdicts are read from it, never
    judged again. ``triton`` is read for the models' config changes only."""

    def __init__(
        self,
        config: Config,
        *,
        canary_board: CanaryBoard,
        triton: TritonScrapers,
        judged_states: Callable[[], Sequence[TargetState]],
        registry: CollectorRegistry,
        stream_board: StreamBoard | None = None,
        readiness: Callable[[], Mapping[str, ReadinessObservation]] | None = None,
        capacity: Callable[[], Sequence[CapacityReading]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._effective = config
        """The config whose models the SLOs cover (the effective one, once applied)."""
        self._streaming: frozenset[TargetModel] = frozenset()
        """The models whose canary streams: they are judged by TTFT and ITL."""
        self._remembered: frozenset[TargetModel] = frozenset()
        """Models that streamed before a restart (state file) and have not yet been seen
        answering plain canary requests."""
        self._readiness = readiness
        """The readiness board's latest observation per target (its clock is ``clock``)."""
        self._down_since: dict[str, float] = {}
        self._capacity = capacity
        """The capacity board's readings, for the exhaustion ticket."""
        self._running_out_since: dict[tuple[str, str], float] = {}
        self._not_serving: list[NotServing] = []
        self._canary = canary_board
        self._stream = stream_board
        """The streaming canaries' TTFT/ITL histograms, for the TTFT and ITL SLOs."""
        self._llm_windows = LlmWindows()
        self._kv_pressure = KvPressureLog()
        self._triton = triton
        self._judged_states = judged_states
        self._clock = clock
        self._lock = threading.RLock()
        state = None if config.state.dir is None else config.state.dir / SLO_STATE_FILE
        self.slo = SLOTracker(slo_specs(config), state_file=state, clock=wall_clock)
        self.recommendations = RecommendationBoard()
        self.p95_history = P95History()
        """The canary p95 at each evaluation, for the status page's sparkline."""
        self._statuses: list[SLOStatus] = []
        self._windows: dict[TargetModel, deque[tuple[float, ModelRates]]] = {}
        self._experiments: deque[Experiment] = deque(maxlen=EXPERIMENT_HISTORY)
        self._alerts = AlertBoard(
            evaluation_interval=config.alerting.evaluation_interval,
            resend_interval=config.alerting.resend_interval,
            clock=wall_clock,
        )
        self._notifiers = NotifierSet(notifiers_for(config))
        """Swapped by a reload only once no evaluation is handing them alerts."""
        registry.register(
            SLOCollector(
                lambda: self.slo.specs,
                self.statuses,
                self.recommendations.active,
                self.recommendations.blocked,
                full=lambda: self._effective.exporter.detail == Detail.FULL,
            )
        )
        registry.register(
            SLIEventsCollector(lambda: self.slo.specs, canary_board, stream_board, clock)
        )
        registry.register(
            AlertDeliveryCollector(lambda: [n.queue.stats() for n in self._notifiers.current()])
        )
        registry.register(ExperimentCollector(self.experiments))

    # -- lifecycle -------------------------------------------------------------------

    def start(self, generator_url: str) -> None:
        self._alerts.generator_url = generator_url
        self._remembered = self.slo.saved_streams()
        self._judge_streams(self._remembered)  # declared before load: their events stay
        self.slo.load()
        for notifier in self._notifiers.current():
            notifier.start()

    def stop(self) -> None:
        for notifier in self._notifiers.current():
            notifier.stop()
        self.slo.save()

    def apply(self, config: Config, effective: Config) -> None:
        """A new config: SLO specs and models to keep; receivers if alerting changed."""
        with self._lock:
            old, self._config = self._config, config
            self._effective = effective
        self.slo.set_specs(slo_specs(effective, self._streaming))
        models = [(t.name, m.name) for t in effective.targets for m in t.models]
        self.recommendations.retain(models)
        self._alerts.evaluation_interval = config.alerting.evaluation_interval
        self._alerts.resend_interval = config.alerting.resend_interval
        if config.alerting != old.alerting:
            fresh = notifiers_for(config)
            for notifier in fresh:
                notifier.start()
            for notifier in self._notifiers.swap(fresh):  # once no evaluation holds them
                notifier.stop()

    # -- observations ----------------------------------------------------------------

    def observe_scrape(self, outcome: ScrapeOutcome | None) -> None:
        """A target's scrape: server SLI events, the advisor's window, config changes."""
        if outcome is None or outcome.rates is None:
            return
        self.slo.observe_server(outcome.target, outcome.rates)
        horizon = outcome.at - self._config.advisor.window
        with self._lock:
            for rates in outcome.rates.models.values():
                window = self._windows.setdefault((outcome.target, rates.model), deque())
                window.append((outcome.at, rates))
                while window and window[0][0] < horizon:
                    window.popleft()
        for change in self._triton.drain_config_changes():
            self._open_experiment(change)

    def _open_experiment(self, change: ModelConfigChange) -> None:
        fields = tuple(sorted(change.changes))
        experiment = Experiment(change.target, change.model, fields or ("config",), self._clock())
        with self._lock:
            self._experiments.append(experiment)
        _log.info(
            "experiment_opened", target=change.target, model=change.model, parameters=list(fields)
        )

    # -- evaluation ------------------------------------------------------------------

    def evaluate(self) -> None:
        """SLOs, the advisor, experiment verdicts, then the alerts due now."""
        now = self._clock()
        # Streams first: a stream in the canary's counts was declared on the board before.
        streams = self._stream.snapshot(now) if self._stream is not None else []
        snapshots = self._canary.snapshot(now)
        self._follow_streams(streams, snapshots)
        self.p95_history.observe(snapshots, now)
        self.slo.observe_canary(snapshots, self._canary.buckets)
        if self._stream is not None:
            stream = self._stream
            self.slo.observe_stream(streams, stream.ttft_buckets, stream.itl_buckets)
        statuses = self.slo.evaluate()
        with self._lock:
            self._statuses = statuses
            config = self._config
        self._advise(config, snapshots, streams, now, statuses)
        self._close_experiments(config, now)
        runbook = config.alerting.runbook_url
        specs = active_alerts(statuses, self.recommendations.active(), runbook)
        hold = config.alerting.not_serving_for
        specs += self._serving_alerts(snapshots, now, runbook, hold)
        specs += self._capacity_alerts(config, now, runbook)
        specs += [experiment_alert(e, runbook) for e in self.experiments() if self._recent(e, now)]
        due = self._alerts.update(specs)
        with self._notifiers.using() as notifiers:  # a reload stops none of them meanwhile
            for notifier in notifiers:
                notifier.notify(due)

    def _follow_streams(
        self, streams: list[StreamSnapshot], snapshots: list[SeriesSnapshot]
    ) -> None:
        """Judges the models the canary streams from by TTFT and ITL: a model on the stream
        board streams; one remembered from the state file streams until its canary
        answers plain requests while off the board."""
        board = {(s.target, s.model) for s in streams}
        sent = {(s.target, s.model) for s in snapshots if any(s.outcomes.values())}
        self._remembered -= sent - board
        streaming = frozenset(board) | self._remembered
        if streaming != self._streaming:
            self._judge_streams(streaming)

    def _judge_streams(self, streaming: frozenset[TargetModel]) -> None:
        """Puts the SLOs of ``streaming`` models in force; logs each model that starts
        streaming, and warns where a written latency SLO is shorter than its streams."""
        with self._lock:
            config, new = self._effective, streaming - self._streaming
            self._streaming = streaming
        self.slo.set_specs(slo_specs(config, streaming))
        for target in config.targets:
            for model in target.models:
                if (target.name, model.name) not in new:
                    continue
                slo, canary = config.slo_for(model), config.canary_for(target, model)
                judged = slo.judged(streams=True).by_kind()
                where = {"target": target.name, "model": model.name}
                _log.info("slo_stream_judged", **where, slos=list(judged))
                warning = stream_latency_warning(slo, canary.stream.max_tokens)
                if warning is not None:
                    problem = f"slo.latency.threshold {warning}"
                    _log.warning("slo_latency_shorter_than_stream", **where, problem=problem)

    def _serving_alerts(
        self, snapshots: list[SeriesSnapshot], now: float, runbook: str, hold: float
    ) -> list[AlertSpec]:
        """Servers down and ready servers' models not serving (failing for ``hold``
        seconds), as alerts."""
        readiness = self._readiness() if self._readiness is not None else {}
        verdicts = not_serving(snapshots, readiness, now, hold)
        with self._lock:
            self._down_since = down_since(self._down_since, readiness)
            down = servers_down(self._down_since, readiness, now)
            self._not_serving = verdicts
        alerts = [server_down_alert(d, now, runbook) for d in down]
        return alerts + [not_serving_alert(v, runbook) for v in verdicts]

    def _capacity_alerts(self, config: Config, now: float, runbook: str) -> list[AlertSpec]:
        """Models running out of capacity for ``capacity.alert_for``, as tickets (the
        generated rule's condition, held as Prometheus holds it)."""
        readings = list(self._capacity()) if self._capacity is not None else []
        settings = config.capacity
        with self._lock:
            since = held_since(self._running_out_since, readings, settings, now)
            self._running_out_since = since
        return [capacity_alert(r, runbook) for r in firing(since, readings, settings, now)]

    def _advise(
        self,
        config: Config,
        snapshots: list[SeriesSnapshot],
        stream_snapshots: list[StreamSnapshot],
        now: float,
        statuses: list[SLOStatus],
    ) -> None:
        states = {state.target: state for state in self._judged_states()}
        thresholds = _thresholds(config)
        canary = {(s.target, s.model): s for s in snapshots}
        streams = {(s.target, s.model): s for s in stream_snapshots}
        by_model: dict[TargetModel, list[SLOStatus]] = {}
        for status in statuses:  # once, not once per model: a thousand models stay linear
            by_model.setdefault((status.spec.target, status.spec.model), []).append(status)
        for target in config.targets:
            state = states.get(target.name)
            windows = self._target_windows(target.name)  # a pipeline's steps' too
            for model in target.models:
                key = (target.name, model.name)
                with self._lock:
                    window = [rates for _, rates in self._windows.get(key, ())]
                if state is None or not window:
                    continue
                snapshot = canary.get(key)
                span = config.advisor.window
                samples = self._canary.samples_between(target.name, model.name, now - span, now + 1)
                advisor_input = advisor_input_for(
                    config,
                    target,
                    model,
                    state,
                    snapshot=snapshot,
                    samples=samples,
                    stream=streams.get(key),
                    statuses=by_model.get(key, ()),
                )
                llm = self._llm_windows.observe(key, state.models.get(model.name), now, span)
                judged = with_llm_window(with_server_window(advisor_input, window), llm)
                self._kv_pressure.update(judged, thresholds)
                advice = advise_pipeline(judged, thresholds, state=state, windows=windows)
                bottleneck = _bottleneck(state, model.name)
                burning = any(s.firing is not None for s in by_model.get(key, ()))
                blocked = blocked_reason(
                    judged,
                    thresholds,
                    bottleneck=bottleneck,
                    burning=burning,
                    recommendations=advice,
                )
                self.recommendations.update(target.name, model.name, advice, blocked)

    def _target_windows(self, target: str) -> dict[str, list[ModelRates]]:
        """Every model's rates over the advisor window on ``target``: the watched ones
        and the models they compose (the scrape reads both)."""
        with self._lock:
            return {
                model: [rates for _, rates in window]
                for (name, model), window in self._windows.items()
                if name == target
            }

    def _close_experiments(self, config: Config, now: float) -> None:
        span = experiment_span(config.advisor.experiment_window)
        with self._lock:
            pending = [(i, e) for i, e in enumerate(self._experiments) if e.verdict == "pending"]
        for index, experiment in pending:
            if now < experiment.changed_at + span:
                continue
            target, model, changed = experiment.target, experiment.model, experiment.changed_at
            before = self._canary.samples_between(target, model, changed - span, changed)
            after = self._canary.samples_between(target, model, changed, changed + span)
            closed = judge_experiment(experiment, before, after)
            with self._lock:
                if index < len(self._experiments) and self._experiments[index] is experiment:
                    self._experiments[index] = closed
            _log.info(
                "experiment_verdict",
                target=closed.target,
                model=closed.model,
                parameters=list(closed.parameters),
                verdict=closed.verdict,
                reason=closed.reason,
            )

    def _recent(self, experiment: Experiment, now: float) -> bool:
        """A verdict is announced (an info alert) for an hour after it is reached."""
        span = experiment_span(self._config.advisor.experiment_window)
        closed_at = experiment.changed_at + span
        return experiment.verdict != "pending" and now - closed_at < EXPERIMENT_ALERT_SECONDS

    # -- reading ---------------------------------------------------------------------

    def statuses(self) -> list[SLOStatus]:
        with self._lock:
            return list(self._statuses)

    def firing(self) -> list[AlertSpec]:
        """The alerts firing as of the latest evaluation."""
        return self._alerts.firing()

    def not_serving(self) -> list[NotServing]:
        """The models found not serving at the latest evaluation."""
        with self._lock:
            return list(self._not_serving)

    def experiments(self) -> list[Experiment]:
        with self._lock:
            return list(self._experiments)
