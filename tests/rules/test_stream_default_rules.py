"""The generated rules follow the stream defaults: a model the config says streams gets
TTFT and ITL rules at their defaults and no whole-request latency rules; a model that
may stream (``auto``) keeps its default latency SLI only while it has no TTFT series,
as the daemon drops that SLO once its canary streams. promtool runs both cases."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tritonwatch.commands.rules.generate import ITL, LATENCY, TTFT, render_config_rules
from tritonwatch.config import parse_config

pytestmark = pytest.mark.real

CONFIG = """
targets:
  - name: llm
    url: http://127.0.0.1:1
    models:
      - {name: gen}
      - {name: chat, canary: {stream: {mode: on}}}
"""
"""No ``slo`` section: ``gen`` may stream (``auto``), ``chat`` surely does."""
GEN = 'target="llm",model="gen"'
MINUTES = 60


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def rule_file(tmp_path: Path) -> Path:
    path = tmp_path / "defaults.rules.yml"
    path.write_text(render_config_rules(parse_config(CONFIG, "defaults.yaml")))
    return path


def test_a_stream_gets_ttft_and_itl_groups_at_their_defaults_and_no_latency(
    rule_file: Path,
) -> None:
    """Breaks if a model that surely streams gets latency rules it is not judged by, or
    TTFT/ITL rules at other thresholds than the defaults (2 s, 200 ms, 99 %)."""
    result = _promtool("check", "rules", str(rule_file))
    assert result.returncode == 0, result.stdout + result.stderr
    groups = {g["name"]: g["rules"] for g in yaml.safe_load(rule_file.read_text())["groups"]}
    assert list(groups) == [
        "tritonwatch-slo-llm-gen-latency",
        "tritonwatch-slo-llm-gen-availability",
        "tritonwatch-slo-llm-chat-availability",
        "tritonwatch-slo-llm-chat-ttft",
        "tritonwatch-slo-llm-chat-itl",
        "tritonwatch-health",
        "tritonwatch-capacity",
    ]
    text = rule_file.read_text()
    assert f'{TTFT}_bucket{{target="llm",model="chat",le="2.0"}}' in text
    assert f'{ITL}_bucket{{target="llm",model="chat",le="0.2"}}' in text
    assert f'{LATENCY}_bucket{{target="llm",model="chat"' not in text
    objectives = {
        name: rule["expr"]
        for name, rules in groups.items()
        for rule in rules
        if rule.get("record") == "tritonwatch:slo_objective:ratio"
    }
    assert objectives["tritonwatch-slo-llm-chat-ttft"] == "vector(0.99)"
    assert objectives["tritonwatch-slo-llm-chat-itl"] == "vector(0.99)"


def _series(streams: bool) -> list[dict[str, str]]:
    """An hour of ``gen``'s canary, one request a second, every one over 50 ms; with
    ``streams`` also the TTFT histogram the streaming canary exports (all fast)."""
    per_minute = 60
    series = [
        {
            "series": f'{LATENCY}_count{{{GEN},protocol="http"}}',
            "values": f"0+{per_minute}x{MINUTES}",
        },
        {
            "series": f'{LATENCY}_bucket{{{GEN},protocol="http",le="0.05"}}',
            "values": f"0x{MINUTES}",
        },
    ]
    if streams:
        series.append(
            {
                "series": f'{TTFT}_count{{{GEN},protocol="http"}}',
                "values": f"0+{per_minute}x{MINUTES}",
            }
        )
    return series


def _case(streams: bool) -> dict[str, Any]:
    sli = f'round(100 * tritonwatch:slo_sli_error:ratio_rate1h{{{GEN},slo="latency"}})'
    pages = f'count(ALERTS{{alertname="TritonSLOBurn",{GEN},slo="latency",severity="page"}})'
    return {
        "name": f"gen's default latency SLI {'with' if streams else 'without'} a TTFT series",
        "interval": "1m",
        "input_series": _series(streams),
        "promql_expr_test": [
            {
                "expr": sli,
                "eval_time": f"{MINUTES}m",
                "exp_samples": []
                if streams
                else [{"labels": f'{{{GEN},slo="latency"}}', "value": 100}],
            },
            {
                "expr": pages,
                "eval_time": f"{MINUTES}m",
                "exp_samples": [] if streams else [{"labels": "{}", "value": 1}],
            },
        ],
    }


@pytest.mark.parametrize("streams", [False, True], ids=["plain", "streaming"])
def test_a_default_latency_sli_goes_once_the_model_streams(
    streams: bool, rule_file: Path, tmp_path: Path
) -> None:
    """Breaks if Prometheus pages a model the canary streams from on the whole stream
    against the default 50 ms (the daemon no longer judges it so), or if the guard also
    silences the latency SLO of a model that answers once."""
    test_file = tmp_path / "defaults.test.yml"
    test_file.write_text(
        yaml.safe_dump(
            {"rule_files": [str(rule_file)], "evaluation_interval": "1m", "tests": [_case(streams)]}
        )
    )
    result = _promtool("test", "rules", str(test_file))
    assert result.returncode == 0, result.stdout + result.stderr
