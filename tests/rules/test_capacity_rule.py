"""The generated ``TritonCapacityExhaustion`` rule and the daemon's in-process evaluation
agree: promtool evaluates the generated rules on a recorded ramp, and the ticket fires at
the very evaluation the daemon's own held condition first fires, not one earlier.

The ramp (tests/fixtures/capacity/ramp.json) is the load the daemon exported, scrape by
scrape, while real perf_analyzer raised an open-loop load on real Triton's ``saturating``
model past its capacity (tests/e2e/test_real_triton_capacity.py's scenario). It was
recorded at one sample a second; here each sample is a minute apart and the windows are
stretched alike (20 m trend, 60 m horizon, 4 m hold): the shape and the noise are the
recording's, on a time axis Prometheus's tests can step through.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from support import REPO
from tritonwatch.analysis.load_trend import exhaustion_seconds, fit_trend
from tritonwatch.commands.rules.capacity import CAPACITY_GROUP
from tritonwatch.commands.rules.generate import render_config_rules
from tritonwatch.config import parse_config
from tritonwatch.config.capacity_schema import CapacityConfig
from tritonwatch.export.capacity_alerts import CAPACITY_EXHAUSTION, firing, held_since
from tritonwatch.export.capacity_metrics import CAPACITY, HEADROOM, LOAD
from tritonwatch.records.capacity_records import CapacityReading, SweptCapacity

pytestmark = pytest.mark.real

RAMP = REPO / "tests" / "fixtures" / "capacity" / "ramp.json"
STEP = 60.0
CONFIG = """
capacity: {trend_window: 20m, forecast_horizon: 60m, alert_for: 4m}
targets:
  - {name: cap, url: http://127.0.0.1:8000, models: [{name: saturating}]}
"""
LABELS = 'target="cap",model="saturating",instance="tw:9849",job="tritonwatch"'


def _ramp() -> tuple[float, list[float]]:
    """The recorded capacity and loads, each to the 6 significant digits the promtool
    series are written with, so both evaluations read the very same numbers."""
    recorded = json.loads(RAMP.read_text())
    return _six(recorded["capacity"]), [_six(v) for v in recorded["loads"]]


def _six(value: float) -> float:
    return float(f"{float(value):.6g}")


def _in_process(capacity: float, loads: list[float], settings: CapacityConfig) -> tuple[int, float]:
    """The daemon's evaluation, one per sample: the index of the sample at which the
    ticket first fires, and the forecast then."""
    samples = [(i * STEP, load) for i, load in enumerate(loads)]
    since: dict[tuple[str, str], float] = {}
    for index, (now, load) in enumerate(samples):
        window = [(t, v) for t, v in samples if now - settings.trend_window <= t <= now]
        trend = fit_trend(window, now)
        if trend is None:
            continue
        reading = CapacityReading(
            target="cap",
            model="saturating",
            service="cap",
            capacity=SweptCapacity(capacity, capacity, True, 0.0),
            load=load,
            canary_load=None,
            slope=trend.slope,
            forecast=trend.predict(settings.forecast_horizon),
            exhaustion_seconds=exhaustion_seconds(trend, capacity),
        )
        since = held_since(since, [reading], settings, now)
        if firing(since, [reading], settings, now):
            assert reading.forecast is not None
            return index, reading.forecast
    raise AssertionError("the daemon's evaluation never fired on the recorded ramp")


def _series(name: str, values: list[float]) -> dict[str, str]:
    return {"series": f"{name}{{{LABELS}}}", "values": " ".join(f"{v:.6g}" for v in values)}


def _minutes(index: int) -> str:
    return f"{index}m"


def test_the_rule_fires_where_the_daemon_fires_on_the_recorded_ramp(tmp_path: Path) -> None:
    """Fails if Prometheus, on the generated rule, fires the ticket one evaluation before
    or after the daemon's own evaluation of the same samples."""
    config = parse_config(CONFIG, "capacity.yaml")
    capacity, loads = _ramp()
    index, forecast = _in_process(capacity, loads, config.capacity)
    assert index > 4, "the ramp starts with headroom: nothing fires at once"
    rules = tmp_path / "rules.yml"
    rules.write_text(render_config_rules(config))
    checked = subprocess.run(
        ["promtool", "check", "rules", str(rules)], capture_output=True, text=True, timeout=120
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    description = (
        "Headroom is under 20% and the load's trend over the last 20m "
        f"(forecast {forecast:.3g}/s) reaches capacity within 1h. Add a replica or an "
        "instance before the latency SLO pages."
    )
    fired: dict[str, Any] = {
        "eval_time": _minutes(index),
        "alertname": CAPACITY_EXHAUSTION,
        "exp_alerts": [
            {
                "exp_labels": {"target": "cap", "model": "saturating", "severity": "ticket"},
                "exp_annotations": {
                    "summary": "saturating on cap is running out of capacity",
                    "description": description,
                    "runbook_url": "docs/runbook.md#tritoncapacityexhaustion",
                },
            }
        ],
    }
    test = {
        "rule_files": [rules.name],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    _series(LOAD, loads),
                    _series(CAPACITY, [capacity] * len(loads)),
                    _series(HEADROOM, [1 - v / capacity for v in loads]),
                ],
                "alert_rule_test": [
                    {"eval_time": _minutes(index - 1), "alertname": CAPACITY_EXHAUSTION},
                    fired,
                ],
            }
        ],
    }
    test_file = tmp_path / "capacity.test.yml"
    test_file.write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run(
        ["promtool", "test", "rules", str(test_file)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_rule_follows_the_capacity_section() -> None:
    """Fails if the generated rule does not take its window, horizon, threshold and hold
    from ``capacity`` (the in-process evaluation does)."""
    groups = yaml.safe_load(render_config_rules(parse_config(CONFIG, "capacity.yaml")))["groups"]
    (group,) = [g for g in groups if g["name"] == CAPACITY_GROUP]
    (rule,) = group["rules"]
    assert rule["alert"] == CAPACITY_EXHAUSTION and rule["for"] == "4m"
    assert f"predict_linear({LOAD}[20m], 3600)" in rule["expr"]
    assert rule["expr"].rstrip().endswith(f"max by (target, model) ({HEADROOM}) < 0.2")
    assert rule["labels"] == {"severity": "ticket"}
