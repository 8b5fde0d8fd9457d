"""Did a configuration change really help? Before/after comparisons with stated tests.

Tuning is a loop of one change at a time, kept only if the numbers really improved.
"Really" is decided here, with rules that can be quoted in a verdict:

* **p95** — a percentile bootstrap: resample the before and after latency samples
  with replacement ``iterations`` times, take p95(after) − p95(before) each time, and
  read the 95 % interval. Entirely below zero: faster; entirely above: slower;
  otherwise the difference is within noise.
* **throughput** — from the measurement windows of each side (perf_analyzer's
  stability windows): higher only if every after-window beats every before-window
  (the ranges do not overlap), lower likewise; else within noise.

Verdict: ``keep`` when one measure improved and neither got worse (and a budget, if
given, holds after); ``revert`` when either got worse or the budget broke;
``inconclusive`` otherwise (a tuner treats it like revert: no proven gain, no change).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from tritonwatch.records.quantiles import nearest_rank

BOOTSTRAP_ITERATIONS = 1000
CONFIDENCE = 0.95
MIN_SAMPLES = 20
EXPERIMENT_SPAN_CAP_SECONDS = 300.0
"""A config change is judged on at most five minutes of canary on each side: the longer
the span, the more unrelated drift (traffic, neighbours) it mixes in."""


class Verdict(StrEnum):
    KEEP = "keep"
    REVERT = "revert"
    INCONCLUSIVE = "inconclusive"


class Direction(StrEnum):
    BETTER = "better"
    WORSE = "worse"
    SAME = "within noise"


@dataclass(frozen=True, slots=True)
class Measurement:
    """One side of a comparison: request latencies (s) and window throughputs (/s)."""

    latencies: Sequence[float]
    window_throughputs: Sequence[float] = ()


@dataclass(frozen=True, slots=True)
class Comparison:
    verdict: Verdict
    p95_before: float
    p95_after: float
    p95_difference_interval: tuple[float, float]
    p95: Direction
    throughput_before: float | None
    throughput_after: float | None
    throughput: Direction
    reason: str
    notes: tuple[str, ...] = field(default=())


def p95_difference_interval(
    before: Sequence[float],
    after: Sequence[float],
    *,
    iterations: int = BOOTSTRAP_ITERATIONS,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> tuple[float, float]:
    """The bootstrap interval of p95(after) − p95(before) (seconds)."""
    rng = random.Random(seed)  # noqa: S311 - statistics, not secrets
    differences = []
    for _ in range(iterations):
        resampled_before = sorted(rng.choices(before, k=len(before)))
        resampled_after = sorted(rng.choices(after, k=len(after)))
        differences.append(
            nearest_rank(resampled_after, 0.95) - nearest_rank(resampled_before, 0.95)
        )
    differences.sort()
    tail = (1.0 - confidence) / 2
    low = differences[int(tail * (iterations - 1))]
    high = differences[int((1.0 - tail) * (iterations - 1))]
    return low, high


def _throughput_direction(before: Sequence[float], after: Sequence[float]) -> Direction:
    if not before or not after:
        return Direction.SAME
    if min(after) > max(before):
        return Direction.BETTER
    if max(after) < min(before):
        return Direction.WORSE
    return Direction.SAME


def compare(
    before: Measurement, after: Measurement, *, budget_p95: float | None = None, seed: int = 0
) -> Comparison:
    """Compares two measurements under the rules in the module docstring.

    Raises:
        ValueError: when a side has fewer than :data:`MIN_SAMPLES` latencies.
    """
    if min(len(before.latencies), len(after.latencies)) < MIN_SAMPLES:
        raise ValueError(f"each side needs at least {MIN_SAMPLES} latency samples")
    p95_before = nearest_rank(sorted(before.latencies), 0.95)
    p95_after = nearest_rank(sorted(after.latencies), 0.95)
    low, high = p95_difference_interval(before.latencies, after.latencies, seed=seed)
    p95 = Direction.BETTER if high < 0 else Direction.WORSE if low > 0 else Direction.SAME
    throughput = _throughput_direction(before.window_throughputs, after.window_throughputs)
    mean_before = _mean(before.window_throughputs)
    mean_after = _mean(after.window_throughputs)
    budget_broken = budget_p95 is not None and p95_after > budget_p95
    if budget_broken:
        verdict, reason = Verdict.REVERT, f"p95 {p95_after * 1e3:.1f} ms breaks the budget"
    elif Direction.WORSE in (p95, throughput):
        worse = "p95" if p95 == Direction.WORSE else "throughput"
        verdict, reason = Verdict.REVERT, f"{worse} got worse beyond noise"
    elif Direction.BETTER in (p95, throughput):
        better = " and ".join(
            n for n, d in (("p95", p95), ("throughput", throughput)) if d == Direction.BETTER
        )
        verdict, reason = Verdict.KEEP, f"{better} improved beyond noise"
    else:
        verdict, reason = Verdict.INCONCLUSIVE, "no difference beyond noise"
    return Comparison(
        verdict,
        p95_before,
        p95_after,
        (low, high),
        p95,
        mean_before,
        mean_after,
        throughput,
        reason,
    )


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass(frozen=True, slots=True)
class Experiment:
    """A config change and, once the after-window has passed, its verdict."""

    target: str
    model: str
    parameters: tuple[str, ...]
    changed_at: float
    """Monotonic time the change was seen."""
    verdict: str = "pending"
    reason: str = ""
    p95_before: float | None = None
    p95_after: float | None = None

    @property
    def parameter(self) -> str:
        return ",".join(self.parameters)


def experiment_span(experiment_window: float) -> float:
    """Seconds of canary judged on each side of a change (``advisor.experiment_window``,
    capped at :data:`EXPERIMENT_SPAN_CAP_SECONDS`)."""
    return min(experiment_window, EXPERIMENT_SPAN_CAP_SECONDS)


def judge_experiment(experiment: Experiment, before: list[float], after: list[float]) -> Experiment:
    """The canary before vs after, same rate: the bootstrap on p95 decides (:func:`compare`)."""
    if min(len(before), len(after)) < MIN_SAMPLES:
        return replace(
            experiment, verdict="inconclusive", reason="too few canary samples on one side"
        )
    result = compare(Measurement(before), Measurement(after))
    reason = result.reason
    if len(experiment.parameters) > 1:
        reason += (
            f"; {len(experiment.parameters)} parameters changed at once, "
            "so the effect cannot be attributed"
        )
    return replace(
        experiment,
        verdict=str(result.verdict),
        reason=reason,
        p95_before=result.p95_before,
        p95_after=result.p95_after,
    )
