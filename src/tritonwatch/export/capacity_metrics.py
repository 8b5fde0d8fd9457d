"""Capacity, load, headroom, the exhaustion forecast, desired replicas, staleness and
cost per model (docs/guides/capacity.md), from the capacity board."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tritonwatch.records.capacity_records import CapacityReading, DesiredReplicas

CAPACITY = "tritonwatch_capacity_inferences_per_second"
CLOSED_LOOP = "tritonwatch_capacity_closed_loop_inferences_per_second"
CAPACITY_AGE = "tritonwatch_capacity_age_seconds"
LOAD = "tritonwatch_capacity_load_inferences_per_second"
CANARY_LOAD = "tritonwatch_capacity_canary_requests_per_second"
HEADROOM = "tritonwatch_capacity_headroom_ratio"
EXHAUSTION = "tritonwatch_capacity_exhaustion_seconds"
TREND = "tritonwatch_capacity_load_trend_inferences_per_second_per_second"
STALE = "tritonwatch_capacity_stale"
DRIFT = "tritonwatch_capacity_compute_drift_ratio"
DESIRED = "tritonwatch_desired_replicas"
COST = "tritonwatch_cost_per_1k_inferences"
GPU_SECONDS = "tritonwatch_gpu_seconds_per_1k_inferences"
_MODEL = ["target", "model"]


class CapacitySource(Protocol):
    """What the collector reads (the capacity board)."""

    def readings(self) -> Sequence[CapacityReading]: ...
    def replicas(self) -> Sequence[DesiredReplicas]: ...


class CapacityCollector(Collector):
    """Renders the capacity board's readings and desired replicas.

    ``wall_clock`` dates the capacity's age at scrape time."""

    def __init__(self, board: CapacitySource, wall_clock: Callable[[], float]) -> None:
        self._readings = board.readings
        self._replicas = board.replicas
        self._wall_clock = wall_clock

    def collect(self) -> Iterator[Metric]:
        def gauge(name: str, text: str, labels: list[str] = _MODEL) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, text, labels=labels)

        capacity = gauge(
            CAPACITY,
            "Highest throughput whose p95 stayed inside the latency budget in the last "
            "sweep (the open-loop check's figure once checked).",
        )
        closed = gauge(CLOSED_LOOP, "The last sweep's closed-loop (concurrency) capacity.")
        age = gauge(CAPACITY_AGE, "Seconds since the sweep the capacity comes from finished.")
        load = gauge(LOAD, "Inferences per second Triton did (nv_inference_count's rate).")
        canary = gauge(CANARY_LOAD, "The canary's own requests per second in that load.")
        headroom = gauge(HEADROOM, "1 - load / capacity; negative past capacity.")
        exhaustion = gauge(
            EXHAUSTION,
            "Seconds until the load's least-squares trend reaches capacity "
            "(0 at or past it, +Inf when flat or falling).",
        )
        trend = gauge(TREND, "Slope of the load's least-squares trend.")
        stale = gauge(
            STALE,
            "1 when the live compute time drifted past capacity.stale_drift from the sweep's.",
        )
        drift = gauge(DRIFT, "Live per-request compute time / the sweep's at the same load - 1.")
        cost = gauge(
            COST,
            "Cost of 1000 inferences in the target price's currency, at today's load or "
            "at capacity.",
            [*_MODEL, "at"],
        )
        gpu_seconds = gauge(
            GPU_SECONDS,
            "GPU-seconds per 1000 inferences (targets without a price).",
            [*_MODEL, "at"],
        )
        now = self._wall_clock()
        for reading in self._readings():
            labels = [reading.target, reading.model]
            if reading.load is not None:
                load.add_metric(labels, reading.load)
            if reading.canary_load is not None:
                canary.add_metric(labels, reading.canary_load)
            if reading.slope is not None:
                trend.add_metric(labels, reading.slope)
            for at, value in reading.cost_per_1k.items():
                cost.add_metric([*labels, at], value)
            for at, value in reading.gpu_seconds_per_1k.items():
                gpu_seconds.add_metric([*labels, at], value)
            swept = reading.capacity
            if swept is None:
                continue
            closed.add_metric(labels, swept.closed_loop)
            age.add_metric(labels, max(now - swept.measured_at, 0.0))
            if reading.drift is not None:
                drift.add_metric(labels, reading.drift)
            stale.add_metric(labels, 1.0 if reading.stale else 0.0)
            per_second = reading.capacity_per_second
            if per_second is None:
                continue
            capacity.add_metric(labels, per_second)
            exhaustion.add_metric(labels, reading.exhaustion_seconds)
            if reading.headroom is not None:
                headroom.add_metric(labels, reading.headroom)
        desired = gauge(
            DESIRED,
            "ceil(load over the service's targets / (capacity x target utilisation)) "
            "+ spare replicas.",
            ["service", "model"],
        )
        for wanted in self._replicas():
            desired.add_metric([wanted.service, wanted.model], wanted.replicas)
        yield from (capacity, closed, age, load, canary, headroom, exhaustion, trend)
        yield from (stale, drift, desired, cost, gpu_seconds)
