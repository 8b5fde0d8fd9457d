"""Capacity from a sweep, headroom, desired replicas, staleness and cost: pure functions
(docs/guides/capacity.md).

Capacity is the highest throughput (inferences/s, as Triton's ``nv_inference_count``
counts) of a sweep step whose p95 stayed inside the model's latency budget. A closed
loop (a fixed number of requests in flight) waits for each answer before sending the
next, so it never builds the queue an open loop (requests arriving on their own clock,
as production traffic does) builds at the same throughput: its figure is checked with
request-rate steps of Poisson arrivals (independent users' bursts; evenly spaced
requests to a model with a steady service time queue no more than the closed loop)
from it downwards (:func:`open_loop_rates`), and the open loop's is reported.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence

from tritonwatch.records.capacity_records import CostAt, DesiredReplicas, SweptCapacity
from tritonwatch.records.sweep_records import StepResult, SweepResult

OPEN_LOOP_FACTORS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)
"""The open-loop check's request rates, as shares of the closed loop's capacity."""
HELD_RATE = 0.9
"""An open-loop step counts only when the server took at least this share of the rate
offered (below it the requests queued past the step, or the generator fell behind)."""
COMPUTE_STAGE = "compute_infer"


def closed_loop_capacity(result: SweepResult) -> float | None:
    """The highest inferences/s of a step that completed requests with its p95 in the
    sweep's budget; None without a budget, for a streaming sweep, or when every step
    broke the budget."""
    budget = result.settings.budget_p95
    if budget is None or result.settings.measure != "latency":
        return None
    inside = [s.inferences_per_second for s in result.steps if s.requests and s.p95 <= budget]
    return max(inside) if inside else None


def open_loop_rates(closed_loop: float, inferences_per_request: float) -> tuple[float, ...]:
    """The request rates (requests/s) of the open-loop check, highest first."""
    return tuple(closed_loop * f / inferences_per_request for f in OPEN_LOOP_FACTORS)


def open_loop_capacity(steps: Iterable[StepResult], budget_p95: float) -> float | None:
    """The highest achieved inferences/s of a request-rate step that held its rate
    (:data:`HELD_RATE`) with its p95 in the budget; None when none did."""
    held = [
        s.inferences_per_second
        for s in steps
        if s.requests and s.p95 <= budget_p95 and s.requests_per_second >= HELD_RATE * s.level
    ]
    return max(held) if held else None


def inferences_per_request(steps: Sequence[StepResult]) -> float:
    """The sweep's inferences per request (its batch size), from its busiest step."""
    busiest = max(steps, key=lambda s: s.requests_per_second, default=None)
    if busiest is None or not busiest.requests_per_second > 0:
        return 1.0
    return busiest.inferences_per_second / busiest.requests_per_second


def swept_compute_seconds(steps: Sequence[StepResult], load: float) -> float | None:
    """The sweep's per-request compute time (Triton's ``compute_infer``) at ``load``
    inferences/s: linear between the two steps whose throughputs bracket it, the
    nearest step's outside them; None when no step has a server breakdown."""
    points = sorted(
        (s.inferences_per_second, s.server.stage_seconds[COMPUTE_STAGE])
        for s in steps
        if s.server is not None and s.server.requests and COMPUTE_STAGE in s.server.stage_seconds
    )
    if not points:
        return None
    if load <= points[0][0]:
        return points[0][1]
    for (low_x, low_y), (high_x, high_y) in itertools.pairwise(points):
        if load <= high_x:
            if high_x == low_x:
                return high_y
            return low_y + (high_y - low_y) * (load - low_x) / (high_x - low_x)
    return points[-1][1]


def compute_drift(live_seconds: float, swept_seconds: float) -> float | None:
    """``live / swept − 1``: how far today's compute time moved from the sweep's."""
    if not swept_seconds > 0:
        return None
    return live_seconds / swept_seconds - 1.0


def desired_replicas(
    service: str,
    model: str,
    loads: dict[str, float],
    capacities: dict[str, float],
    *,
    target_utilisation: float,
    spare: int,
) -> DesiredReplicas | None:
    """``ceil(Σ load / (capacity × target_utilisation)) + spare`` over the service's
    targets (``loads`` and ``capacities`` by target). One replica's capacity is the
    lowest measured among them (the replica that saturates first); None when none has
    one."""
    measured = [c for c in capacities.values() if c > 0]
    if not measured:
        return None
    per_replica = min(measured)
    total = sum(loads.values())
    replicas = math.ceil(total / (per_replica * target_utilisation) - 1e-9) + spare
    targets = tuple(sorted(loads))
    return DesiredReplicas(service, model, max(replicas, 0), total, per_replica, targets)


def cost_per_1k(
    cost_per_second: float, share: float | None, load: float | None, capacity: float | None
) -> dict[CostAt, float]:
    """What 1 000 inferences cost (or take of GPU-seconds) for a resource that costs
    ``cost_per_second``: at load, the model's ``share`` of it (its part of the target's
    compute time) over its load; at capacity, the whole of it over the capacity (the
    model alone on the target, running at capacity). A side without its figures is left
    out."""
    costs: dict[CostAt, float] = {}
    if share is not None and load is not None and load > 0:
        costs["load"] = 1000.0 * cost_per_second * share / load
    if capacity is not None and capacity > 0:
        costs["capacity"] = 1000.0 * cost_per_second / capacity
    return costs


def swept_capacity(result: SweepResult, finished_at: float) -> SweptCapacity | None:
    """The capacity figures of a judged sweep (its open-loop check included); None when
    it has no closed-loop capacity (no budget, streaming, every step over budget)."""
    closed = closed_loop_capacity(result)
    if closed is None:
        return None
    budget = result.settings.budget_p95
    assert budget is not None  # a closed-loop capacity needs one
    opened = open_loop_capacity(result.open_loop, budget) if result.open_loop_checked else None
    return SweptCapacity(closed, opened, result.open_loop_checked, finished_at)
