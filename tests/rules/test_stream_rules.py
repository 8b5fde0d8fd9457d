"""The generated TTFT and ITL rules: promtool accepts them and, over hand-built streaming
canary histograms, pages on a burn just above the 14.4× line and not just below it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tritonwatch.commands.rules.generate import ITL, TTFT, le_label, render_config_rules
from tritonwatch.config import parse_config

pytestmark = pytest.mark.real

CONFIG = """
slo:
  ttft: {threshold: 500ms, objective: 0.95}
  itl: {threshold: 50ms, objective: 0.99}
targets:
  - name: llm
    url: http://127.0.0.1:1
    models: [{name: gen}]
"""
QUIET_MINUTES = 3 * 24 * 60
"""Three quiet days first, so only the last hour's burn counts: the longer windows hold
too little of it for the 6× page or either ticket."""
EVAL_TIME = "73h"
LABELS = 'target="llm",model="gen"'


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120)


def _histogram(
    name: str, protocol: str, le: str, per_minute: int, good: int
) -> list[dict[str, str]]:
    """``per_minute`` observations a minute, all good for three days, then ``good`` of
    them at or under ``le`` a minute for the last hour."""
    start = per_minute * QUIET_MINUTES
    series = f'{LABELS},protocol="{protocol}"'
    return [
        {
            "series": f"{name}_count{{{series}}}",
            "values": f"0+{per_minute}x{QUIET_MINUTES - 1} {start}+{per_minute}x60",
        },
        {
            "series": f'{name}_bucket{{{series},le="{le}"}}',
            "values": f"0+{per_minute}x{QUIET_MINUTES - 1} {start}+{good}x60",
        },
    ]


def _page(slo: str, what: str, error_percent: str, budget: str, objective: str) -> dict[str, Any]:
    return {
        "exp_labels": {
            "target": "llm", "model": "gen", "slo": slo, "severity": "page", "source": "canary"
        },
        "exp_annotations": {
            "summary": f"gen on llm is burning its {what} error budget (page)",
            "description": f"Canary error ratio {error_percent} over the long window against a "
            f"budget of {budget} (objective {objective}); page when the error ratio is above "
            "14.4× over 1h and 5m, or 6× over 6h and 30m, with enough events in the long "
            "window that 10 failures alone stay under the limit.",
            "runbook_url": "docs/runbook.md#tritonsloburn",
        },
    }  # fmt: skip


def _case(
    name: str, series: list[dict[str, str]], slo: str, sli_percent: int, alerts: list[Any]
) -> dict[str, Any]:
    return {
        "name": name,
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [
            {
                "expr": f'round(100 * tritonwatch:slo_sli_error:ratio_rate1h{{slo="{slo}"}})',
                "eval_time": EVAL_TIME,
                "exp_samples": [{"labels": f'{{{LABELS},slo="{slo}"}}', "value": sli_percent}],
            }
        ],
        "alert_rule_test": [
            {"eval_time": EVAL_TIME, "alertname": "TritonSLOBurn", "exp_alerts": alerts}
        ],
    }


TTFT_LE, ITL_LE = le_label(0.5), le_label(0.05)
TTFT_PAGE = _page("ttft", "TTFT (time to first token)", "80%", "5%", "95%")
ITL_PAGE = _page("itl", "ITL (inter-token latency)", "15%", "1%", "99%")
CASES = [
    # TTFT: 1 − bucket{le="0.5"} / count summed over protocols; page limit 14.4 × 5 % = 72 %.
    _case(
        "ttft page fires when 80 % of the last hour's first tokens (http and grpc) are late",
        _histogram(TTFT, "http", TTFT_LE, 50, 10) + _histogram(TTFT, "grpc", TTFT_LE, 50, 10),
        "ttft",
        80,
        [TTFT_PAGE],
    ),
    _case(
        "no ttft page when 70 % of the last hour's first tokens are late",
        _histogram(TTFT, "http", TTFT_LE, 50, 15) + _histogram(TTFT, "grpc", TTFT_LE, 50, 15),
        "ttft",
        70,
        [],
    ),
    # ITL: one observation per gap; page limit 14.4 × 1 % = 14.4 %.
    _case(
        "itl page fires when 15 % of the last hour's token gaps are over 50 ms",
        _histogram(ITL, "http", ITL_LE, 100, 85),
        "itl",
        15,
        [ITL_PAGE],
    ),
    _case(
        "no itl page when 14 % of the last hour's token gaps are over 50 ms",
        _histogram(ITL, "http", ITL_LE, 100, 86),
        "itl",
        14,
        [],
    ),
]


@pytest.fixture
def rule_file(tmp_path: Path) -> Path:
    path = tmp_path / "stream.rules.yml"
    path.write_text(render_config_rules(parse_config(CONFIG, "stream.yaml")))
    return path


def test_promtool_accepts_the_ttft_and_itl_rules(rule_file: Path) -> None:
    """Breaks if promtool refuses the TTFT/ITL groups or a group's rules go missing."""
    result = _promtool("check", "rules", str(rule_file))
    assert result.returncode == 0, result.stdout + result.stderr
    # 4 SLOs × 16 rules, 5 of health, 1 of capacity
    assert "SUCCESS: 70 rules found" in result.stdout
    groups = [g["name"] for g in yaml.safe_load(rule_file.read_text())["groups"]]
    assert groups == [
        *(f"tritonwatch-slo-llm-gen-{k}" for k in ("latency", "availability", "ttft", "itl")),
        "tritonwatch-health",
        "tritonwatch-capacity",
    ]


def test_ttft_and_itl_rules_read_the_stream_histograms_at_the_threshold(rule_file: Path) -> None:
    """Breaks if the TTFT/ITL SLI reads another histogram or another ``le`` than the threshold."""
    text = rule_file.read_text()
    assert f'{TTFT}_bucket{{{LABELS},le="0.5"}}' in text
    assert f'{ITL}_bucket{{{LABELS},le="0.05"}}' in text


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_promtool_pages_on_a_burn_and_not_just_below_it(
    case: dict[str, Any], rule_file: Path, tmp_path: Path
) -> None:
    """Breaks if the TTFT/ITL SLI or page condition is wrong (fires late, early, or not at all)."""
    test_file = tmp_path / "stream.test.yml"
    test_file.write_text(
        yaml.safe_dump(
            {"rule_files": [str(rule_file)], "evaluation_interval": "10m", "tests": [case]},
            allow_unicode=True,
        )
    )
    result = _promtool("test", "rules", str(test_file))
    assert result.returncode == 0, result.stdout + result.stderr
