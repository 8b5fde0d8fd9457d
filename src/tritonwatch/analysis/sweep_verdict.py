"""A sweep's conclusions: the knee, the operating point under the budget, and the
caveat when the knee lies where the load generator itself was saturated.

The runner (:mod:`tritonwatch.sweep.load_sweep`, or
:mod:`tritonwatch.sweep.stream_sweep`
for a streaming model) only measures; whoever ran it (``tritonwatch sweep``, the tuner,
the daemon's scheduled sweeps) judges the steps here. A plain sweep is judged on
inferences/s and the latency p95; a streaming one on output tokens/s (what a generative
server serves) and the p95 of ``settings.measure`` (TTFT or ITL), since a stream's
whole-request latency grows with the tokens asked for, not with the load alone.
"""

from __future__ import annotations

from tritonwatch.analysis.knee import find_knee, operating_point
from tritonwatch.records.sweep_records import (
    CurvePoint,
    Measure,
    StepResult,
    SweepResult,
    SweepSteps,
)


def curve_point(step: StepResult, measure: Measure) -> CurvePoint:
    """The step as the knee and the operating point read it: its throughput (output
    tokens/s when it streamed) and the p95 of ``measure``."""
    return CurvePoint(step.level, step.throughput, step.quantiles(measure)["p95"])


def judge_sweep(measured: SweepSteps) -> SweepResult:
    """The knee of the steps that completed requests, the operating point when the
    settings have a p95 budget (on ``settings.measure``), and the measured warnings
    plus a saturation caveat."""
    settings, steps = measured.settings, measured.steps
    warnings = list(measured.warnings)
    points = [curve_point(s, settings.measure) for s in steps if s.requests]
    knee = find_knee(points) if points else None
    best = None
    if settings.budget_p95 is not None and points:
        point = operating_point(points, settings.budget_p95)
        best = next((s for s in steps if point and s.level == point.concurrency), None)
    if knee is not None:
        bound = [s.level for s in steps if s.generator_bound]
        if bound and knee.concurrency >= min(bound):
            warnings.append(
                f"the knee at {knee.concurrency:g} lies where the load generator was saturated: "
                "treat it as a lower bound, not the server's knee"
            )
    return SweepResult(settings, steps, knee, best, measured.stopped_at_budget, tuple(warnings))
