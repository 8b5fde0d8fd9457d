"""Judged sweep results built from hand-made steps, for report and candidate tests."""

from __future__ import annotations

from collections.abc import Sequence

from tritonwatch.analysis.sweep_verdict import judge_sweep
from tritonwatch.sweep_records import StepResult, SweepResult, SweepSettings, SweepSteps


def judged(
    settings: SweepSettings,
    steps: Sequence[StepResult],
    stopped_at_budget: bool = False,
    warnings: Sequence[str] = (),
) -> SweepResult:
    """What ``judge_sweep`` concludes from these steps, as if a runner had measured them."""
    return judge_sweep(SweepSteps(settings, tuple(steps), stopped_at_budget, tuple(warnings)))
