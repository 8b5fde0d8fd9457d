"""The status page shows a pipeline's steps and a model's response cache on its row."""

from __future__ import annotations

from dataclasses import replace

from pipeline_support import MS, issue_bls, issue_ensemble
from tritonwatch.analysis.breakdown import BottleneckThresholds, judge_target
from tritonwatch.export.pipeline_view import steps_line
from tritonwatch.export.status_page import ModelStatus, StatusSnapshot, render_status_page
from tritonwatch.records.target_state import StepBreakdown, StepTime


def test_the_ensembles_steps_read_as_one_line_with_the_slow_step_named() -> None:
    """Breaks if the row shows only the ensemble's own (misleading) breakdown."""
    judged = judge_target(issue_ensemble(), {"pipeline": BottleneckThresholds.for_budget(0.02)})
    line = steps_line(judged.models["pipeline"])
    assert line == (
        "prep 3.4 ms · core 25.4 ms (queue 20.1) · post 1.5 ms · own 0.7 ms; "
        "core's queue takes 65% of 31.0 ms per request (over 50%)"
    )


def test_bls_calls_show_how_often_and_that_they_are_estimated() -> None:
    judged = judge_target(issue_bls(), {"bls": BottleneckThresholds.for_budget(0.05)})
    line = steps_line(judged.models["bls"])
    assert line is not None and line.startswith("core ×2 50.0 ms (queue 40.0) · own 2.0 ms;")
    steps = judged.models["bls"].steps
    assert steps is not None
    shared = replace(steps, steps=(replace(steps.steps[0], calls_estimated=True),))
    line = steps_line(replace(judged.models["bls"], steps=shared, bottleneck=None))
    assert line == "core ×2~ 50.0 ms (queue 40.0) · own 2.0 ms"


def test_parallel_and_missing_steps_are_said() -> None:
    step = StepTime("left", 1.0, False, 0.0, 0.0, 10 * MS, 0.0, 0.0)
    steps = StepBreakdown("ensemble", (step,), 9 * MS, 0.0, 0.0, True, ("right",))
    judged = judge_target(issue_ensemble()).models["pipeline"]
    line = steps_line(replace(judged, steps=steps, bottleneck=None))
    assert line == (
        "left 10.0 ms · own 0.0 ms · right (no readings) (parallel branches: the steps overlap)"
    )
    assert steps_line(replace(judged, steps=None)) is None


def test_the_row_renders_both_lines_escaped() -> None:
    row = ModelStatus(
        "t",
        "pipeline",
        "http",
        True,
        0.02,
        {},
        {},
        steps="prep 3.4 ms · core 25.4 ms (queue 20.1) · post 1.5 ms · own 0.7 ms; core's queue",
        cache="response cache: 90% hits · hit 0.01 ms · miss 0.05 ms",
    )
    page = render_status_page(StatusSnapshot([row]))
    assert (
        '<p class="steps">steps per request: prep 3.4 ms · core 25.4 ms (queue 20.1) · '
        "post 1.5 ms · own 0.7 ms; core&#x27;s queue</p>"
    ) in page
    assert '<p class="cache">response cache: 90% hits · hit 0.01 ms · miss 0.05 ms</p>' in page
    plain = render_status_page(StatusSnapshot([replace(row, steps=None, cache=None)]))
    assert 'class="steps"' not in plain and 'class="cache"' not in plain
