"""Every model's capacity picture: capacity from its last sweep, load from each scrape,
headroom, the load's trend, staleness and cost (docs/guides/capacity.md).

Who owns what: :class:`CapacityBoard` owns the load samples and the readings. Only the
scrape jobs write (:meth:`CapacityBoard.observe`, right after the bottleneck board
published the target's judged state) and only the daemon's lifecycle applies a config
(:meth:`CapacityBoard.apply`) and a sweep job says when the model's sweep runs
(:meth:`CapacityBoard.set_sweeping`); the exporter, the evaluator and the status page read
copies (:meth:`CapacityBoard.readings`, :meth:`CapacityBoard.replicas`). One lock
guards the samples and readings; the sweep board is read through its own snapshot, and
the callback that brings a sweep forward runs outside the lock.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from tritonwatch.analysis.capacity import (
    compute_drift,
    cost_per_1k,
    desired_replicas,
    swept_capacity,
    swept_compute_seconds,
)
from tritonwatch.analysis.load_trend import exhaustion_seconds, fit_trend
from tritonwatch.common.logs import get_logger
from tritonwatch.config.capacity_schema import CapacityConfig, TargetPrice
from tritonwatch.config.schema import Config
from tritonwatch.records.capacity_records import CapacityReading, DesiredReplicas, SweptCapacity
from tritonwatch.records.sweep_records import SweepBoard, SweepResult
from tritonwatch.records.target_state import ModelState, TargetState

_log = get_logger("capacity")
DRIFT_WINDOW = 300.0
"""The live compute time is averaged over this much of the latest scrapes (seconds),
weighted by the requests each executed (or the trend window, when shorter)."""
MIN_DRIFT_REQUESTS = 20
"""Fewer executed requests in the drift window than this say nothing about drift."""
BringSweepForward = Callable[[str, str], None]
"""(target, model): run the model's scheduled sweep now."""
TargetModel = tuple[str, str]


@dataclass(slots=True)
class _Sample:
    at: float
    load: float
    executed: float
    """Requests the model executed over the scrape's window (cache hits left out)."""
    compute_seconds: float | None


@dataclass(frozen=True, slots=True)
class _TargetFacts:
    service: str
    price: TargetPrice | None
    models: frozenset[str]


@dataclass(slots=True)
class _Model:
    samples: deque[_Sample] = field(default_factory=deque)
    brought_forward_for: float | None = None
    """The sweep (its finish time) a stale capacity already brought a sweep forward for."""
    sweeping: bool = False
    """The model's sweep runs: its load is the sweep's, not production's."""
    skip_next: bool = False
    """The first scrape after a sweep still counts some of the sweep's requests."""


class CapacityBoard:
    """The capacity readings of every watched model, as of its target's last scrape.

    Args:
        sweeps: the scheduled sweeps' results (capacity and the swept compute time).
        bring_forward: called once per stale sweep result when sweeps are on.
        clock: monotonic seconds, the trend's time axis.
    """

    def __init__(
        self,
        sweeps: SweepBoard,
        bring_forward: BringSweepForward,
        *,
        clock: Callable[[], float],
    ) -> None:
        self._sweeps = sweeps
        self._bring_forward = bring_forward
        self._clock = clock
        self._lock = threading.Lock()
        self._settings = CapacityConfig()
        self._targets: dict[str, _TargetFacts] = {}
        self._swept: set[TargetModel] = set()
        self._models: dict[TargetModel, _Model] = {}
        self._readings: dict[TargetModel, CapacityReading] = {}

    def apply(self, config: Config, swept: set[TargetModel]) -> None:
        """The effective config in force; ``swept``: the models with scheduled sweeps.
        Samples and readings of models no longer watched are dropped."""
        targets = {
            t.name: _TargetFacts(t.service_name, t.price, frozenset(m.name for m in t.models))
            for t in config.targets
        }
        watched = {(t, m) for t, facts in targets.items() for m in facts.models}
        with self._lock:
            self._settings = config.capacity
            self._targets = targets
            self._swept = set(swept)
            self._models = {k: v for k, v in self._models.items() if k in watched}
            self._readings = {k: v for k, v in self._readings.items() if k in watched}

    def observe(self, state: TargetState) -> None:
        """After a scrape of ``state.target``: a load sample per model, then its readings."""
        now, sweeps = self._clock(), self._sweeps.snapshot()
        stale: list[TargetModel] = []
        with self._lock:
            facts = self._targets.get(state.target)
            if facts is None:
                return
            settings = self._settings
            busy = {name: _busy_seconds(m) for name, m in state.models.items()}
            total_busy = sum(b for b in busy.values() if b is not None)
            for name in sorted(facts.models):
                key = (state.target, name)
                model = self._models.setdefault(key, _Model())
                held = model.sweeping or model.skip_next
                model.skip_next = model.skip_next and model.sweeping
                scraped = None if held else state.models.get(name)
                _add_sample(model.samples, scraped, now, settings.trend_window)
                reading = _reading(
                    key,
                    model.samples,
                    facts=facts,
                    state=state,
                    swept=sweeps.get(key),
                    settings=settings,
                    now=now,
                    share=_share(busy.get(name), total_busy),
                    held=held,
                )
                self._readings[key] = reading
                finished = reading.capacity.measured_at if reading.capacity else None
                if reading.stale and key in self._swept and model.brought_forward_for != finished:
                    model.brought_forward_for = finished
                    stale.append(key)
        for target, name in stale:
            _log.info("capacity_stale_sweep_brought_forward", target=target, model=name)
            self._bring_forward(target, name)

    def set_sweeping(self, target: str, model: str, sweeping: bool) -> None:
        """A sweep of the model starts or ends: no load sample is taken while it runs, nor
        from the first scrape after it (the load would be the sweep's, and would bend the
        trend and the headroom toward a saturation production never saw); the last
        production load is held meanwhile."""
        with self._lock:
            state = self._models.setdefault((target, model), _Model())
            state.sweeping = sweeping
            state.skip_next = state.skip_next or not sweeping

    def readings(self) -> list[CapacityReading]:
        """Every watched model's latest reading, sorted by (target, model)."""
        with self._lock:
            return [self._readings[k] for k in sorted(self._readings)]

    def replicas(self) -> list[DesiredReplicas]:
        """The desired replicas of every (service, model) one of whose targets has a
        capacity, sorted by (service, model)."""
        with self._lock:
            settings, readings = self._settings, list(self._readings.values())
        groups: dict[TargetModel, tuple[dict[str, float], dict[str, float]]] = {}
        for reading in readings:
            loads, capacities = groups.setdefault((reading.service, reading.model), ({}, {}))
            loads[reading.target] = reading.load or 0.0
            if reading.capacity_per_second is not None:
                capacities[reading.target] = reading.capacity_per_second
        wanted = [
            desired_replicas(
                service,
                model,
                loads,
                capacities,
                target_utilisation=settings.target_utilisation,
                spare=settings.spare_replicas,
            )
            for (service, model), (loads, capacities) in sorted(groups.items())
        ]
        return [w for w in wanted if w is not None]

    @property
    def settings(self) -> CapacityConfig:
        with self._lock:
            return self._settings


def _busy_seconds(model: ModelState) -> float | None:
    """Compute-seconds per second the model kept the server busy over the last window."""
    rates = model.rates
    if rates is None or rates.requests_per_second is None:
        return None
    return rates.requests_per_second * (rates.compute_infer_seconds_average or 0.0)


def _share(busy: float | None, total: float) -> float | None:
    return None if busy is None or not total > 0 else busy / total


def _add_sample(
    samples: deque[_Sample], model: ModelState | None, now: float, window: float
) -> None:
    """Appends the scrape's load (when it had a window) and drops samples past ``window``."""
    rates = model.rates if model is not None else None
    if rates is not None and rates.inferences_per_second is not None:
        requests = (rates.requests_per_second or 0.0) * rates.interval_seconds
        hits = rates.cache.hits_per_second * rates.interval_seconds if rates.cache else 0.0
        executed = max(requests - hits, 0.0)
        samples.append(
            _Sample(now, rates.inferences_per_second, executed, rates.compute_infer_seconds_average)
        )
    while samples and samples[0].at < now - window:
        samples.popleft()


def _live_compute(samples: deque[_Sample], now: float, window: float) -> float | None:
    """The executed-request-weighted mean compute time over the drift window."""
    recent = [s for s in samples if s.at >= now - window and s.compute_seconds is not None]
    executed = sum(s.executed for s in recent)
    if executed < MIN_DRIFT_REQUESTS:
        return None
    return sum(s.executed * (s.compute_seconds or 0.0) for s in recent) / executed


def _reading(
    key: TargetModel,
    samples: deque[_Sample],
    *,
    facts: _TargetFacts,
    state: TargetState,
    swept: tuple[SweepResult, float] | None,
    settings: CapacityConfig,
    now: float,
    share: float | None,
    held: bool,
) -> CapacityReading:
    """One model's reading at ``now``; ``held``: the scrape was left out (a sweep), so
    the last production load stands in for it and the series stay exported (the
    generated rule's ``for:`` would restart at every sweep if they went away)."""
    target, name = key
    model = state.models.get(name)
    fresh = bool(samples) and (held or samples[-1].at == now)
    load = samples[-1].load if fresh else None
    capacity: SweptCapacity | None = None
    if swept is not None:
        capacity = swept_capacity(*swept)
    per_second = None if capacity is None else capacity.inferences_per_second
    trend = fit_trend([(s.at, s.load) for s in samples], now)
    exhaustion = float("inf")
    forecast = slope = None
    if trend is not None:
        slope, forecast = trend.slope, trend.predict(settings.forecast_horizon)
        if per_second is not None and per_second > 0:
            exhaustion = exhaustion_seconds(trend, per_second)
    drift = None
    if swept is not None and load is not None:
        swept_seconds = swept_compute_seconds(swept[0].steps, load)
        live = _live_compute(samples, now, min(DRIFT_WINDOW, settings.trend_window))
        if swept_seconds is not None and live is not None:
            drift = compute_drift(live, swept_seconds)
    gpus = len(state.gpus)
    costs = {}
    gpu_seconds = {}
    if facts.price is not None:
        hourly = facts.price.per_node_hour or (facts.price.per_gpu_hour or 0.0) * gpus
        if hourly > 0:
            costs = cost_per_1k(hourly / 3600.0, share, load, per_second)
    elif gpus:
        gpu_seconds = cost_per_1k(float(gpus), share, load, per_second)
    return CapacityReading(
        target=target,
        model=name,
        service=facts.service,
        capacity=capacity,
        load=load,
        canary_load=model.canary_requests_per_second if model is not None else None,
        slope=slope,
        forecast=forecast,
        exhaustion_seconds=exhaustion,
        drift=drift,
        stale=drift is not None and abs(drift) > settings.stale_drift,
        cost_per_1k=costs,
        gpu_seconds_per_1k=gpu_seconds,
    )
