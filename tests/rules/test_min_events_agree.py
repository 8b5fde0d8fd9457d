"""The min-events gate and the burn conditions agree between the two evaluation paths:
the daemon's SLOTracker and the generated rules under promtool, on the same traffic."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from support import REPO
from tritonwatch.analysis.slo import BURN_POLICY, SLOKind, SLOSpec, slo_specs
from tritonwatch.commands.rules.generate import render_config_rules
from tritonwatch.config import load_config
from tritonwatch.records.observations import CanaryResult, Outcome
from tritonwatch.runtime.slo_tracker import SLOTracker
from tritonwatch.state.canary_board import CanaryBoard

pytestmark = pytest.mark.real

DEMO = REPO / "examples" / "demo.yaml"
START = 1_699_999_980.0
"""A whole minute (Unix seconds), so the store's 1-minute buckets line up with the
promtool minutes."""
Minute = dict[str, int]
"""Requests of one minute by outcome."""


def _good(minutes: int) -> list[Minute]:
    return [{"success": 60}] * minutes


SCENARIOS: dict[str, list[Minute]] = {
    # The false page: a 12 s restart five minutes after the daemon started.
    "restart after five minutes": [*_good(5), {"success": 55, "connection_error": 5}, *_good(40)],
    "ten failures after five minutes": [
        *_good(5),
        {"success": 50, "connection_error": 10},
        *_good(40),
    ],
    # A real outage on a young window: pages once the hour holds its 695 events.
    "every request fails from minute 5": _good(5) + [{"http_error": 60}] * 20,
    # A real outage on a full window: pages at once, as before the gate.
    "every request fails after 70 good minutes": _good(70) + [{"timeout": 60}] * 3,
    # Our own client's faults change nothing: neither good nor bad.
    "client errors beside a partial failure": _good(3)
    + [{"success": 30, "client_error": 25, "timeout": 5}] * 20,
}


def _availability() -> SLOSpec:
    (spec,) = [s for s in slo_specs(load_config(DEMO)) if s.kind == SLOKind.AVAILABILITY]
    return spec


def _in_process(spec: SLOSpec, minutes: list[Minute]) -> list[set[str]]:
    """The severities whose condition holds in process after each minute (1-based)."""
    stats = CanaryBoard()
    stats.declare([(spec.target, spec.model, "http")])
    tracker = SLOTracker([spec])
    held = []
    for index, minute in enumerate(minutes, start=1):
        for outcome, count in minute.items():
            for _ in range(count):
                stats.record(
                    CanaryResult(spec.target, spec.model, "http", 0.0, Outcome(outcome), 0.001)
                )
        # A minute's events stamped in its middle: the store's bucket of that minute.
        tracker.observe_canary(stats.snapshot(0.0), stats.buckets, at=START + 60 * index - 30)
        (status,) = tracker.evaluate(START + 60 * index)
        held.append({
            str(c.severity)
            for c in BURN_POLICY
            if c.holds(status.error_ratios, spec.error_budget, status.window_events,
                       spec.min_bad_events)
        })  # fmt: skip
    return held


def _series(spec: SLOSpec, minutes: list[Minute]) -> list[dict[str, str]]:
    """Cumulative counters at minute 0 (all zero) … len(minutes), by outcome."""
    outcomes = sorted({o for minute in minutes for o in minute})
    series = []
    for outcome in outcomes:
        values, running = ["0"], 0
        for minute in minutes:
            running += minute.get(outcome, 0)
            values.append(str(running))
        labels = f'target="{spec.target}",model="{spec.model}",protocol="http",outcome="{outcome}"'
        series.append(
            {"series": f"tritonwatch_canary_requests_total{{{labels}}}", "values": " ".join(values)}
        )
    return series


def _promtool_case(
    name: str, spec: SLOSpec, minutes: list[Minute], held: list[set[str]]
) -> dict[str, Any]:
    firing = 'count by (severity) (ALERTS{alertname="TritonSLOBurn",slo="availability",alertstate="firing"})'
    return {
        "name": name,
        "interval": "1m",
        "input_series": _series(spec, minutes),
        "promql_expr_test": [
            {
                "expr": firing,
                "eval_time": f"{index}m",
                "exp_samples": [
                    {"labels": f'{{severity="{s}"}}', "value": 1} for s in sorted(severities)
                ],
            }
            for index, severities in enumerate(held, start=1)
        ],
    }


def test_in_process_and_generated_conditions_agree_minute_by_minute(tmp_path: Path) -> None:
    """Breaks if the daemon and Prometheus disagree at any minute of any scenario on
    which burn conditions hold (the gate included), or if the scenarios stop covering
    both a gated non-page and a page."""
    spec = _availability()
    rules = tmp_path / "rules.yml"
    rules.write_text(render_config_rules(load_config(DEMO)))
    held = {name: _in_process(spec, minutes) for name, minutes in SCENARIOS.items()}
    # The scenarios mean what their names say (in process).
    assert all(not s for s in held["restart after five minutes"])
    assert all(not s for s in held["ten failures after five minutes"])
    young = held["every request fails from minute 5"]
    assert next(i for i, s in enumerate(young, start=1) if "page" in s) == 12  # 720 ≥ 694.4
    assert "page" in held["every request fails after 70 good minutes"][70]  # minute 71
    cases = [_promtool_case(name, spec, SCENARIOS[name], held[name]) for name in SCENARIOS]
    test_file = tmp_path / "agree.test.yml"
    test_file.write_text(
        yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": cases})
    )
    result = subprocess.run(
        ["promtool", "test", "rules", str(test_file)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
