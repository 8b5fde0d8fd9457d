"""The generated ``TritonModelNotServing`` rule holds ``alerting.not_serving_for``, as the
daemon does: its ``for:`` is the hold, its window the hold but never under a minute;
promtool evaluates the generated rules against the series of a model that starts failing
every request at 2m (the committed file's default, a minute, is
deploy/prometheus/tests/tritonwatch-health.test.yml)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tritonwatch.commands.rules.generate import render_config_rules
from tritonwatch.commands.rules.health import HEALTH_GROUP
from tritonwatch.config import parse_config
from tritonwatch.export.alerts import MODEL_NOT_SERVING

pytestmark = pytest.mark.real

TARGETS = "targets:\n  - {name: local, url: http://127.0.0.1:8000, models: [{name: simple}]}\n"
LABELS = 'target="local",model="simple",protocol="http",instance="tw:9849",job="tritonwatch"'
SERIES = [
    {"series": 'tritonwatch_up{target="local",instance="tw:9849",job="tritonwatch"}',
     "values": "1x40"},
    # 1 request/s; from 2 min on every one fails.
    {"series": f'tritonwatch_canary_requests_total{{{LABELS},outcome="success"}}',
     "values": "0+15x8 120x30"},
    {"series": f'tritonwatch_canary_requests_total{{{LABELS},outcome="http_error"}}',
     "values": "0x8 15+15x30"},
]  # fmt: skip


def _rules(hold: str) -> str:
    """The rule file generated for a config whose ``not_serving_for`` is ``hold``."""
    config = f"alerting: {{not_serving_for: {hold}}}\n" + TARGETS
    return render_config_rules(parse_config(config, "hold.yaml"))


def _rule(hold: str) -> dict[str, Any]:
    text = _rules(hold)
    (group,) = [g for g in yaml.safe_load(text)["groups"] if g["name"] == HEALTH_GROUP]
    (rule,) = [r for r in group["rules"] if r.get("alert") == MODEL_NOT_SERVING]
    return rule


@pytest.mark.parametrize(
    ("hold", "held_for", "window"),
    [("5s", "5s", "1m"), ("1500ms", "1500ms", "1m"), ("90s", "90s", "90s"), ("3m", "3m", "3m")],
)
def test_the_rule_holds_the_configured_time_over_a_window_of_at_least_a_minute(
    hold: str, held_for: str, window: str
) -> None:
    """Breaks if the rule's ``for:`` is not ``not_serving_for``, or its window is not the
    hold (a minute at the least)."""
    rule = _rule(hold)
    assert rule["for"] == held_for
    assert rule["expr"].count(f"[{window}]") == 2  # failures, and no success, over it
    last = "last minute" if window == "1m" else f"last {window}"
    assert f"failed over the {last} and none succeeded" in rule["annotations"]["description"]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120)


def _fires(at: str, failed: int, window: str) -> dict[str, Any]:
    """The case: at ``at`` the page fires, ``failed`` requests failing over ``window``."""
    annotations = {
        "summary": "simple on local is not serving: the server is ready, every canary "
        "request fails",
        "description": f"{failed} canary requests failed over the {window} and none "
        "succeeded, while the server answers its readiness check. The daemon's own alert "
        "carries the last error.",
        "runbook_url": "docs/runbook.md#tritonmodelnotserving",
    }
    labels = {"target": "local", "model": "simple", "severity": "page"}
    return {
        "eval_time": at,
        "alertname": MODEL_NOT_SERVING,
        "exp_alerts": [{"exp_labels": labels, "exp_annotations": annotations}],
    }


CASES = {
    # The window (a minute) holds only failures from 3m; held 5 s: the next evaluation.
    "5s": [{"eval_time": "3m", "alertname": MODEL_NOT_SERVING}, _fires("3m15s", 60, "last minute")],
    # The 3m window holds only failures from 5m, held 3m: at 8m, not at 4m (the default's).
    "3m": [
        {"eval_time": "4m", "alertname": MODEL_NOT_SERVING},
        {"eval_time": "7m45s", "alertname": MODEL_NOT_SERVING},
        _fires("8m", 180, "last 3m"),
    ],
}


@pytest.mark.parametrize("hold", sorted(CASES))
def test_promtool_fires_after_the_configured_hold_and_not_before(hold: str, tmp_path: Path) -> None:
    """Breaks if Prometheus, on the generated rules, pages before ``not_serving_for`` (or
    at the default minute when it is longer), or not once it has passed."""
    rules = tmp_path / "rules.yml"
    rules.write_text(_rules(hold))
    checked = _promtool("check", "rules", str(rules))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    test = {
        "rule_files": [rules.name],
        "evaluation_interval": "15s",
        "tests": [{"interval": "15s", "input_series": SERIES, "alert_rule_test": CASES[hold]}],
    }
    test_file = tmp_path / "not-serving.test.yml"
    test_file.write_text(yaml.safe_dump(test, sort_keys=False))
    result = _promtool("test", "rules", str(test_file))
    assert result.returncode == 0, result.stdout + result.stderr
