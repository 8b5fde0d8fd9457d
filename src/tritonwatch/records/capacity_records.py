"""What the capacity board concluded for each model: capacity, load, headroom, trend,
staleness and cost (docs/guides/capacity.md). Written by
:class:`~tritonwatch.runtime.capacity_board.CapacityBoard` on the scrape job's thread,
read by the exporter, the evaluator and the status page."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

CostAt = Literal["load", "capacity"]
"""A cost per 1 000 inferences at today's load, or with the model running at capacity."""


@dataclass(frozen=True, slots=True)
class SweptCapacity:
    """A sweep's capacity figures for one model (inferences per second).

    ``closed_loop`` is the highest throughput of a concurrency step whose p95 stayed in
    the budget; ``open_loop`` the highest achieved throughput of a request-rate step at
    or under it whose p95 stayed in the budget (None when not checked, or when no rate
    step stayed in it). :attr:`inferences_per_second` is what capacity means: the open
    loop's figure once checked.
    """

    closed_loop: float
    open_loop: float | None
    checked: bool
    measured_at: float
    """Wall-clock time the sweep finished."""

    @property
    def inferences_per_second(self) -> float | None:
        return self.open_loop if self.checked else self.closed_loop


@dataclass(frozen=True, slots=True)
class CapacityReading:
    """One model's capacity picture as of its target's last scrape.

    ``load`` counts every inference Triton did (``nv_inference_count``'s rate, the
    canary's included: ``canary_load`` is its share); ``headroom`` is
    ``1 − load / capacity`` (negative past capacity); ``exhaustion_seconds`` is when the
    fitted trend reaches capacity (0 at or past it, ``inf`` when flat or falling).
    ``drift`` is the live per-request compute time against the sweep's at the same load
    (``live / swept − 1``), ``stale`` when it is past ``capacity.stale_drift``.
    ``cost_per_1k`` (in the target price's currency) and ``gpu_seconds_per_1k`` are
    keyed by where they are taken.
    """

    target: str
    model: str
    service: str
    capacity: SweptCapacity | None
    load: float | None
    canary_load: float | None
    slope: float | None = None
    """The fitted load trend, inferences per second per second."""
    forecast: float | None = None
    """The trend's load at ``now + capacity.forecast_horizon``."""
    exhaustion_seconds: float = math.inf
    drift: float | None = None
    stale: bool = False
    cost_per_1k: Mapping[CostAt, float] = field(default_factory=dict)
    gpu_seconds_per_1k: Mapping[CostAt, float] = field(default_factory=dict)

    @property
    def capacity_per_second(self) -> float | None:
        return None if self.capacity is None else self.capacity.inferences_per_second

    @property
    def headroom(self) -> float | None:
        capacity = self.capacity_per_second
        if capacity is None or not capacity > 0 or self.load is None:
            return None
        return 1.0 - self.load / capacity


@dataclass(frozen=True, slots=True)
class DesiredReplicas:
    """How many replicas of ``service`` hold ``model``'s load: ``ceil(load / (capacity ×
    target_utilisation)) + spare``, over the service's targets that serve it."""

    service: str
    model: str
    replicas: int
    load: float
    capacity_per_replica: float
    targets: tuple[str, ...]
