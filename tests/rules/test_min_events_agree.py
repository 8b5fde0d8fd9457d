"""The burn conditions and the min-events gate agree between the two evaluation paths,
minute by minute, model by model: the daemon's SLOTracker, and the generic generated
rules under promtool over the SLI series the daemon exports (its own
``/metrics`` families, rendered each minute from the same canary board).

Two models with different objectives, latency thresholds and gates see the same
traffic: ``simple`` (99.9 % available, 95 % under 50 ms, the default gate of 10) and
``resnet`` (99 % available, 99 % under 100 ms, ``alert_min_bad_events: 0``, no gate).
Every scenario of both runs in one promtool rule-file run."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from sli_support import exported

from tritonwatch.analysis.slo import BURN_POLICY, SLOSpec, slo_specs
from tritonwatch.commands.rules.generate import render_config_rules
from tritonwatch.config import parse_config
from tritonwatch.export.sli_metrics import SLIEventsCollector
from tritonwatch.export.slo_metrics import SLOCollector
from tritonwatch.records.observations import CanaryResult, Outcome
from tritonwatch.runtime.histogram_bounds import slo_buckets
from tritonwatch.runtime.slo_tracker import SLOTracker
from tritonwatch.state.canary_board import CanaryBoard

pytestmark = pytest.mark.real

CONFIG = parse_config(
    """
targets:
  - name: local
    url: http://127.0.0.1:1
    models:
      - name: simple
        slo: {latency: {threshold: 50ms, objective: 0.95}, availability: {objective: 0.999}}
      - name: resnet
        slo:
          latency: {threshold: 100ms, objective: 0.99}
          availability: {objective: 0.99}
          alert_min_bad_events: 0
""",
    "agree.yaml",
)
MODELS = ("simple", "resnet")
START = 1_699_999_980.0
"""A whole minute (Unix seconds), so the store's 1-minute buckets line up with the
promtool minutes."""
Minute = dict[str, int]
"""Requests of one minute by kind: an outcome (successes take 1 ms), or ``medium``
(a success in 70 ms: slow for simple only) or ``slow`` (a success in 200 ms)."""
LATENCIES = {"medium": 0.070, "slow": 0.200}
Held = dict[tuple[str, str], set[str]]
"""(model, slo) → the severities whose burn condition holds."""


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
    # A real outage on a young window: simple pages once the hour holds its 695 events.
    "every request fails from minute 6": _good(5) + [{"http_error": 60}] * 20,
    # A real outage on a full window: pages at once, as before the gate.
    "every request fails after 70 good minutes": _good(70) + [{"timeout": 60}] * 3,
    # Our own client's faults change nothing: neither good nor bad.
    "client errors beside a partial failure": _good(3)
    + [{"success": 30, "client_error": 25, "timeout": 5}] * 20,
    # Latency by each model's threshold: 70 ms is slow for simple only.
    "slow requests": _good(5) + [{"success": 40, "medium": 15, "slow": 5}] * 30,
}


def _specs() -> list[SLOSpec]:
    return slo_specs(CONFIG)


def _result(model: str, kind: str) -> CanaryResult:
    outcome = Outcome.SUCCESS if kind in LATENCIES else Outcome(kind)
    return CanaryResult("local", model, "http", 0.0, outcome, LATENCIES.get(kind, 0.001))


def _run(minutes: list[Minute]) -> tuple[list[Held], dict[str, list[float]]]:
    """Both paths over ``minutes``: what holds in process after each minute (1-based),
    and each exported series at minute 0 … len(minutes)."""
    specs = _specs()
    board = CanaryBoard(slo_buckets(CONFIG))
    board.declare([("local", model, "http") for model in MODELS])
    tracker = SLOTracker(specs)
    registry = CollectorRegistry()
    registry.register(SLIEventsCollector(lambda: specs, board, clock=lambda: 0.0))
    registry.register(SLOCollector(lambda: specs, list, list))
    series = {name: [value] for name, value in exported(registry).items()}
    held: list[Held] = []
    for index, minute in enumerate(minutes, start=1):
        for model in MODELS:
            for kind, count in minute.items():
                for _ in range(count):
                    board.record(_result(model, kind))
        # A minute's events stamped in its middle: the store's bucket of that minute.
        tracker.observe_canary(board.snapshot(0.0), board.buckets, at=START + 60 * index - 30)
        statuses = tracker.evaluate(START + 60 * index)
        assert len(statuses) == len(specs)
        held.append(
            {
                (s.spec.model, str(s.spec.kind)): {
                    str(c.severity)
                    for c in BURN_POLICY
                    if c.holds(
                        s.error_ratios, s.spec.error_budget, s.window_events, s.spec.min_bad_events
                    )
                }
                for s in statuses
            }
        )
        rendered = exported(registry)
        assert set(rendered) == set(series)
        for name, value in rendered.items():
            series[name].append(value)
    return held, series


def _promtool_case(name: str, held: list[Held], series: dict[str, list[float]]) -> dict[str, Any]:
    firing = (
        'count by (model, slo, severity) (ALERTS{alertname="TritonSLOBurn",alertstate="firing"})'
    )
    return {
        "name": name,
        "interval": "1m",
        "input_series": [
            {"series": key, "values": " ".join(repr(v) for v in values)}
            for key, values in sorted(series.items())
        ],
        "promql_expr_test": [
            {
                "expr": firing,
                "eval_time": f"{index}m",
                "exp_samples": [
                    {"labels": f'{{model="{m}",slo="{slo}",severity="{s}"}}', "value": 1}
                    for (m, slo), severities in sorted(minute.items())
                    for s in sorted(severities)
                ],
            }
            for index, minute in enumerate(held, start=1)
        ],
    }


def _first(held: list[Held], model: str, slo: str, severity: str) -> int | None:
    """The first minute (1-based) at which ``severity`` holds for ``model``'s ``slo``."""
    return next(
        (i for i, minute in enumerate(held, start=1) if severity in minute[(model, slo)]), None
    )


def test_in_process_and_generated_conditions_agree_minute_by_minute(tmp_path: Path) -> None:
    """Breaks if the daemon and Prometheus disagree, at any minute of any scenario, for
    either model or SLO, on which burn conditions hold (the gate included), if the series
    the daemon exports do not carry each model's objective and gate, or if the scenarios
    stop covering a gated non-page, a page, an ungated ticket and a latency burn."""
    rules = tmp_path / "rules.yml"
    rules.write_text(render_config_rules(CONFIG))
    runs = {name: _run(minutes) for name, minutes in SCENARIOS.items()}
    held = {name: run[0] for name, run in runs.items()}

    # The exported objectives and gates are each model's.
    series = runs["restart after five minutes"][1]
    gauges = {key: values[-1] for key, values in series.items() if "_total" not in key}
    assert gauges == {
        'tritonwatch_slo_alert_min_bad_events{model="resnet",slo="availability",target="local"}': 0,
        'tritonwatch_slo_alert_min_bad_events{model="resnet",slo="latency",target="local"}': 0,
        'tritonwatch_slo_alert_min_bad_events{model="simple",slo="availability",target="local"}': 10,
        'tritonwatch_slo_alert_min_bad_events{model="simple",slo="latency",target="local"}': 10,
        'tritonwatch_slo_objective_ratio{model="resnet",slo="availability",target="local"}': 0.99,
        'tritonwatch_slo_objective_ratio{model="resnet",slo="latency",target="local"}': 0.99,
        'tritonwatch_slo_objective_ratio{model="simple",slo="availability",target="local"}': 0.999,
        'tritonwatch_slo_objective_ratio{model="simple",slo="latency",target="local"}': 0.95,
    }
    # The scenarios mean what their names say (in process).
    restart = held["restart after five minutes"]
    assert all(not m[("simple", "availability")] for m in restart)  # gated
    assert _first(restart, "resnet", "availability", "ticket") == 6  # no gate: 1.7 % > 1 %
    assert all("page" not in m[("resnet", "availability")] for m in restart)
    assert all(not m[("simple", "availability")] for m in held["ten failures after five minutes"])
    young = held["every request fails from minute 6"]
    assert _first(young, "simple", "availability", "page") == 12  # 720 ≥ 694.4
    assert _first(young, "resnet", "availability", "page") == 6
    old = held["every request fails after 70 good minutes"]
    assert _first(old, "simple", "availability", "page") == 71
    # 3 failed minutes of a full hour are 5 %: under resnet's 14.4 % (14.4 × 1 %).
    assert _first(old, "resnet", "availability", "page") is None
    slow = held["slow requests"]
    assert _first(slow, "simple", "latency", "ticket") is not None  # 33 % slow of 5 %
    assert _first(slow, "simple", "latency", "page") is None  # under 72 %
    assert _first(slow, "resnet", "latency", "page") is not None  # 8.3 % slow of 1 %, 6×

    cases = [_promtool_case(name, *runs[name]) for name in SCENARIOS]
    test_file = tmp_path / "agree.test.yml"
    test_file.write_text(
        yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": cases})
    )
    result = subprocess.run(
        ["promtool", "test", "rules", str(test_file)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
