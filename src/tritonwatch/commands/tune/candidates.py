"""Which single change to try next, from the last sweep and the current config.

docs/design.md §7's table, read off a sweep instead of a live window (the tuner has a sweep
in hand; the daemon's advisor reads live windows). Candidates come in priority
order; the tuner tries the first one it has not already rejected.

* dynamic batching off, ``max_batch_size`` > 0 → enable it (100 µs queue delay);
* p95 over the budget somewhere, queue the largest server stage there, delay > 0 →
  halve ``max_queue_delay_microseconds``;
* throughput flat (knee reached) while requests wait at least half as long as they
  compute at the top level, or while the GPU is under 80 % busy there (when the
  tuner can read Triton's GPU metrics) — or throughput still rising at the top level
  inside the budget with the GPU under 80 % busy → one more instance
  (``instance_group[0].count`` + 1);
* p95 inside the budget at the top level while requests there wait out at least half
  the delay → halve it: the timer, not a filled batch, dispatches them, so the wait
  buys little batching and costs every request latency (and, at a fixed concurrency,
  throughput);
* batches well below what could batch at the top level — ``max_batch_size``, or the
  rows in flight when fewer (a closed loop of 16 requests never forms a batch of 32)
  — with p95 under half the budget → double the delay (or 100 µs from 0) for fuller
  batches;
* more than one instance and the last added one bought nothing (it was reverted) →
  no change is proposed: the tuner's revert already undid it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from tritonwatch.records.sweep_records import StepResult, SweepResult

MIN_DELAY_MICROSECONDS = 100
FULL_BATCH_SHARE = 0.5
GPU_HEADROOM = 0.8
"""A flat curve with the GPU below this is held back by instances, not by the GPU."""
WAITING_SHARE_OF_COMPUTE = 0.5
"""Requests waiting at least half as long as they compute are waiting for an instance."""
TIMER_BOUND_SHARE = 0.5
"""Requests queueing at least half the delay on average are dispatched by its timer."""


@dataclass(frozen=True, slots=True)
class Change:
    """One parameter, its current and proposed value, and why."""

    parameter: str
    current: Any
    proposed: Any
    reason: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.parameter, repr(self.proposed))

    def apply(self, config: dict[str, Any]) -> dict[str, Any]:
        """A copy of ``config`` with this one change made."""
        updated = copy.deepcopy(config)
        if self.parameter == "dynamic_batching":
            updated["dynamic_batching"] = self.proposed
        elif self.parameter == "dynamic_batching.max_queue_delay_microseconds":
            updated.setdefault("dynamic_batching", {})["max_queue_delay_microseconds"] = (
                self.proposed
            )
        elif self.parameter == "instance_group[0].count":
            updated["instance_group"][0]["count"] = self.proposed
        else:  # pragma: no cover - every Change is built below
            raise ValueError(f"unknown parameter {self.parameter}")
        return updated


def _delay(config: dict[str, Any]) -> int | None:
    batching = config.get("dynamic_batching")
    if not isinstance(batching, dict):
        return None
    return int(batching.get("max_queue_delay_microseconds", 0))


def _instance_change(
    groups: list[dict[str, Any]], top: StepResult, sweep: SweepResult, budget_p95: float
) -> Change | None:
    """One more instance when the curve is held back by instances, not by the GPU: flat
    while requests wait or the GPU has room, or still rising at the top level inside the
    budget with the GPU under :data:`GPU_HEADROOM` (more instances, more in parallel)."""
    if top.server is None or sweep.knee is None:
        return None
    compute = sum(v for k, v in top.server.stage_seconds.items() if k != "queue")
    waiting = top.server.stage_seconds["queue"] >= WAITING_SHARE_OF_COMPUTE * compute
    gpu_room = top.gpu_utilization is not None and top.gpu_utilization < GPU_HEADROOM
    count = int(groups[0].get("count", 1))
    if sweep.knee.reached and (waiting or gpu_room):
        why = (
            f"requests wait {top.server.stage_seconds['queue'] * 1e3:.1f} ms for "
            f"{compute * 1e3:.1f} ms of compute"
            if waiting
            else f"the GPU is {top.gpu_utilization:.0%} busy"
        )
        reason = f"throughput flat from {sweep.knee.concurrency:g} while {why}"
    elif not sweep.knee.reached and gpu_room and top.p95 < budget_p95:
        reason = (
            f"throughput still rising at {top.level:g} inside the budget with the GPU "
            f"{top.gpu_utilization:.0%} busy: more instances run more in parallel"
        )
    else:
        return None
    return Change("instance_group[0].count", count, count + 1, reason)


def _halved(delay: int) -> int:
    """Half the delay, but not below 100 µs; from 100 µs or less, straight to 0."""
    return max(delay // 2, MIN_DELAY_MICROSECONDS) if delay > MIN_DELAY_MICROSECONDS else 0


def _top(steps: tuple[StepResult, ...]) -> StepResult | None:
    measured = [s for s in steps if s.requests and s.server is not None]
    return max(measured, key=lambda s: s.level) if measured else None


def _rows_in_flight(top: StepResult, sweep: SweepResult) -> float:
    """How many rows can wait together at the top level: its outstanding requests
    (the concurrency, or the rate mode's in-flight cap) times the rows each carries."""
    settings = sweep.settings
    requests = settings.rate_in_flight if settings.mode == "rate" else top.level
    rows = top.inferences_per_second / top.requests_per_second if top.requests_per_second else 1.0
    return requests * rows


def _delay_changes(
    delay: int, max_batch: int, top: StepResult, sweep: SweepResult, budget_p95: float
) -> list[Change]:
    """Lower the delay when its timer dispatches batches inside the budget; raise it
    when batches stay small with plenty of budget left (in that order)."""
    assert top.server is not None
    parameter = "dynamic_batching.max_queue_delay_microseconds"
    found: list[Change] = []
    queue = top.server.stage_seconds.get("queue", 0.0)
    batch = top.server.batch_size_average or 1.0
    if delay and top.p95 < budget_p95 and queue >= TIMER_BOUND_SHARE * delay * 1e-6:
        found.append(
            Change(
                parameter,
                delay,
                _halved(delay),
                f"requests wait {queue * 1e3:.2f} ms of the {delay / 1e3:g} ms delay at "
                f"{top.level:g} for batches of {batch:.1f}: the timer dispatches them",
            )
        )
    fillable = min(max_batch, _rows_in_flight(top, sweep))
    if batch < FULL_BATCH_SHARE * fillable and top.p95 < budget_p95 / 2:
        found.append(
            Change(
                parameter,
                delay,
                delay * 2 if delay else MIN_DELAY_MICROSECONDS,
                f"batches of {batch:.1f} of {fillable:g} possible at {top.level:g} with p95 "
                f"{top.p95 * 1e3:.1f} ms, under half the budget",
            )
        )
    return found


def candidates(config: dict[str, Any], sweep: SweepResult, budget_p95: float) -> list[Change]:
    """Every applicable single change, highest priority first."""
    found: list[Change] = []
    max_batch = int(config.get("max_batch_size", 0))
    delay = _delay(config)
    top = _top(sweep.steps)
    if max_batch > 0 and delay is None:
        enabled = {"max_queue_delay_microseconds": MIN_DELAY_MICROSECONDS}
        reason = "batching model without dynamic batching: requests run one by one"
        found.append(Change("dynamic_batching", None, enabled, reason))
    over = [s for s in sweep.steps if s.server is not None and s.p95 > budget_p95]
    if over and delay:
        step = min(over, key=lambda s: s.level)
        assert step.server is not None
        stages = step.server.stage_seconds
        if max(stages, key=lambda k: stages[k]) == "queue":
            found.append(
                Change(
                    "dynamic_batching.max_queue_delay_microseconds",
                    delay,
                    _halved(delay),
                    f"p95 {step.p95 * 1e3:.1f} ms over the budget at {step.level:g} with queue "
                    f"{stages['queue'] * 1e3:.1f} ms the largest stage",
                )
            )
    groups = config.get("instance_group") or []
    if top is not None and top.server is not None and groups and sweep.knee:
        instance = _instance_change(groups, top, sweep, budget_p95)
        if instance is not None:
            found.append(instance)
    if top is not None and top.server is not None and delay is not None and max_batch > 1:
        found.extend(_delay_changes(delay, max_batch, top, sweep, budget_p95))
    return found
