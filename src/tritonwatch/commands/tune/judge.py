"""Keep or roll back one tuning step: the tuner's objective is throughput within budget.

The rule, stated so a verdict can quote it (statistics from
:mod:`tritonwatch.analysis.experiments`):

1. After the change nothing fits the budget, but before something did → revert.
2. Before nothing fit and now something does → keep.
3. Neither fits: keep only if p95 at the lowest level fell beyond noise (bootstrap
   95 % interval of the difference entirely below 0) — the change moved toward the
   budget; else revert.
4. Both fit: compare the operating points' throughput windows — higher beyond noise
   (no overlap) → keep, lower → revert; within noise → keep only if p95 at the
   before's operating level fell beyond noise, else revert (inconclusive).
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonwatch.analysis.experiments import (
    MIN_SAMPLES,
    Direction,
    Measurement,
    Verdict,
    compare,
)
from tritonwatch.records.sweep_records import StepResult, SweepResult


@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: Verdict
    reason: str


def _measurement(step: StepResult) -> Measurement:
    return Measurement(step.latency_samples, step.window_throughputs)


def _at_level(sweep: SweepResult, level: float) -> StepResult | None:
    return next(
        (s for s in sweep.steps if s.level == level and len(s.latency_samples) >= MIN_SAMPLES), None
    )


def _p95_fell(before: StepResult | None, after: StepResult | None) -> bool:
    if before is None or after is None:
        return False
    if min(len(before.latency_samples), len(after.latency_samples)) < MIN_SAMPLES:
        return False
    return compare(_measurement(before), _measurement(after)).p95 == Direction.BETTER


def judge(before: SweepResult, after: SweepResult) -> Judgement:
    """Applies the rule in the module docstring."""
    old, new = before.operating_point, after.operating_point
    if new is None and old is not None:
        return Judgement(Verdict.REVERT, "nothing fits the budget any more")
    if new is not None and old is None:
        return Judgement(Verdict.KEEP, f"now fits the budget at {new.level:g}")
    if new is None or old is None:
        return _toward_the_budget(before, after)
    return _between_operating_points(old, new, after)


def _toward_the_budget(before: SweepResult, after: SweepResult) -> Judgement:
    first = before.steps[0].level if before.steps else 0.0
    if _p95_fell(_at_level(before, first), _at_level(after, first)):
        return Judgement(Verdict.KEEP, f"p95 at {first:g} fell beyond noise (still over budget)")
    return Judgement(Verdict.REVERT, "still over budget and p95 did not fall beyond noise")


def _between_operating_points(old: StepResult, new: StepResult, after: SweepResult) -> Judgement:
    if min(len(old.latency_samples), len(new.latency_samples)) < MIN_SAMPLES:
        # A starved host (or a very slow model) measured too few requests at one of the
        # two points to tell noise from change: say so rather than guess, or crash.
        return Judgement(
            Verdict.INCONCLUSIVE,
            f"too few requests at the operating points to compare (fewer than {MIN_SAMPLES})",
        )
    comparison = compare(_measurement(old), _measurement(new))
    if comparison.throughput == Direction.BETTER:
        return Judgement(
            Verdict.KEEP,
            f"throughput in budget {old.inferences_per_second:.1f} → "
            f"{new.inferences_per_second:.1f}/s beyond noise",
        )
    if comparison.throughput == Direction.WORSE:
        return Judgement(Verdict.REVERT, "throughput in budget fell beyond noise")
    if _p95_fell(old, _at_level(after, old.level)):
        return Judgement(Verdict.KEEP, f"same throughput, p95 at {old.level:g} fell beyond noise")
    return Judgement(Verdict.INCONCLUSIVE, "no improvement beyond noise")
