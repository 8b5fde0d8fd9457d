"""TTFT and ITL reach Prometheus as the daemon's SLI counters: over a streaming canary's
boards the daemon exports ``tritonwatch_slo_events_total`` and
``tritonwatch_slo_good_events_total`` with ``slo="ttft"`` (one event per successful
stream, good when its first token came within the threshold) and ``slo="itl"`` (one per
gap between tokens), summed over the model's protocols; and the generic rules, over
those counters as the daemon exports them, page on a TTFT or ITL burn just above the
14.4× line and not just below it."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from sli_support import Render, StreamingDaemon

from tritonwatch.commands.rules.generate import render_config_rules
from tritonwatch.config import parse_config

pytestmark = pytest.mark.real

CONFIG = parse_config(
    """
slo:
  ttft: {threshold: 500ms, objective: 0.95}
  itl: {threshold: 50ms, objective: 0.99}
targets:
  - name: llm
    url: http://127.0.0.1:1
    models: [{name: gen, canary: {stream: {mode: on}}}]
""",
    "stream.yaml",
)
"""``gen`` surely streams: judged by availability, TTFT and ITL (no latency SLO)."""
KEYS = [("llm", "gen", "http"), ("llm", "gen", "grpc")]
QUIET_MINUTES = 3 * 24 * 60
"""Three quiet days first, so only the last hour's burn counts: the longer windows hold
too little of it for the 6× page or either ticket."""
EVAL_TIME = "73h"
LABELS = 'model="gen",target="llm"'
Minute = Callable[[StreamingDaemon], None]
"""One minute of the streaming canary."""


def _daemon() -> StreamingDaemon:
    daemon = StreamingDaemon(CONFIG)
    daemon.canary.declare(KEYS)
    daemon.streams.declare(KEYS)
    return daemon


def _key(name: str, slo: str) -> str:
    return f'{name}{{model="gen",slo="{slo}",target="llm"}}'


def test_the_daemon_exports_ttft_and_itl_events_counted_at_their_thresholds() -> None:
    """Breaks if the daemon's /metrics lacks the TTFT or ITL SLI counters, counts other
    events (a stream, a gap; both protocols), reads another bucket than the threshold
    (a value at it is good, just above it bad), or exports a latency SLO for the stream."""
    daemon = _daemon()
    gaps = (0.05, 0.02, 0.0501)  # at the ITL threshold, under it, just over it
    for protocol, first_tokens in (("http", (0.5, 0.2, 0.5001)), ("grpc", (0.6, 0.05))):
        for ttft in first_tokens:
            daemon.stream("llm", "gen", protocol, ttft, gaps)
    assert daemon.exported() == {
        _key("tritonwatch_slo_events_total", "availability"): 5,
        _key("tritonwatch_slo_good_events_total", "availability"): 5,
        _key("tritonwatch_slo_events_total", "ttft"): 5,
        _key("tritonwatch_slo_good_events_total", "ttft"): 3,
        _key("tritonwatch_slo_events_total", "itl"): 15,
        _key("tritonwatch_slo_good_events_total", "itl"): 10,
        _key("tritonwatch_slo_objective_ratio", "availability"): 0.999,
        _key("tritonwatch_slo_objective_ratio", "ttft"): 0.95,
        _key("tritonwatch_slo_objective_ratio", "itl"): 0.99,
        _key("tritonwatch_slo_alert_min_bad_events", "availability"): 10,
        _key("tritonwatch_slo_alert_min_bad_events", "ttft"): 10,
        _key("tritonwatch_slo_alert_min_bad_events", "itl"): 10,
    }


def _ttft(late: int) -> Minute:
    """50 streams on each protocol, ``late`` of them with a first token over 500 ms (the
    others exactly at it); one 20 ms gap each."""

    def minute(daemon: StreamingDaemon) -> None:
        for protocol in ("http", "grpc"):
            for index in range(50):
                daemon.stream("llm", "gen", protocol, 0.6 if index < late else 0.5, (0.02,))

    return minute


def _itl(slow: int) -> Minute:
    """100 streams on http, ``slow`` of them with their gap over 50 ms (the others
    exactly at it)."""

    def minute(daemon: StreamingDaemon) -> None:
        for index in range(100):
            daemon.stream("llm", "gen", "http", 0.1, (0.0501 if index < slow else 0.05,))

    return minute


def _series(burn: Minute) -> list[dict[str, str]]:
    """The daemon's SLI series over three quiet days and a burning hour: each counter
    grows each minute by what the daemon's /metrics showed it grow over one quiet
    minute, then over one burning minute."""
    daemon = _daemon()
    renders: list[Render] = [daemon.exported()]
    _ttft(0)(daemon)
    renders.append(daemon.exported())
    burn(daemon)
    renders.append(daemon.exported())
    start, quiet, burning = renders
    series = []
    for key, value in sorted(burning.items()):
        if "_total{" not in key:
            values = f"{value:g}x{QUIET_MINUTES + 60}"
        else:
            step, fast = quiet[key] - start[key], value - quiet[key]
            assert start[key] == 0
            values = f"0+{step:g}x{QUIET_MINUTES - 1} {step * QUIET_MINUTES:g}+{fast:g}x60"
        series.append({"series": key, "values": values})
    return series


def _page(slo: str, what: str, error_percent: str) -> dict[str, Any]:
    """The page as the daemon's own alert is labelled and names the SLO."""
    return {
        "exp_labels": {
            "target": "llm",
            "model": "gen",
            "slo": slo,
            "severity": "page",
            "source": "canary",
        },
        "exp_annotations": {
            "summary": f"gen on llm is burning its {what} error budget (page)",
            "description": f"Canary error ratio {error_percent} over the long window; page when "
            "the error ratio is above 14.4× over 1h and 5m, or 6× over 6h and 30m the error "
            "budget (1 − tritonwatch_slo_objective_ratio), with enough events in the long "
            "window that tritonwatch_slo_alert_min_bad_events failures alone stay under the "
            "limit.",
            "runbook_url": "docs/runbook.md#tritonsloburn",
        },
    }


def _case(
    name: str, burn: Minute, slo: str, sli_percent: int, alerts: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "name": name,
        "interval": "1m",
        "input_series": _series(burn),
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


TTFT_PAGE = _page("ttft", "TTFT (time to first token)", "80%")
ITL_PAGE = _page("itl", "ITL (inter-token latency)", "15%")
CASES = [
    # TTFT summed over protocols; page limit 14.4 × 5 % = 72 %.
    (
        "ttft page fires when 80 % of the last hour's first tokens (http and grpc) are late",
        _ttft(40),
        "ttft",
        80,
        [TTFT_PAGE],
    ),
    ("no ttft page when 70 % of the last hour's first tokens are late", _ttft(35), "ttft", 70, []),
    # ITL: one event per gap; page limit 14.4 × 1 % = 14.4 %.
    (
        "itl page fires when 15 % of the last hour's token gaps are over 50 ms",
        _itl(15),
        "itl",
        15,
        [ITL_PAGE],
    ),
    ("no itl page when 14 % of the last hour's token gaps are over 50 ms", _itl(14), "itl", 14, []),
]


@pytest.fixture
def rule_file(tmp_path: Path) -> Path:
    path = tmp_path / "stream.rules.yml"
    path.write_text(render_config_rules(CONFIG))
    return path


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_promtool_pages_on_a_burn_and_not_just_below_it(
    case: tuple[str, Minute, str, int, list[dict[str, Any]]], rule_file: Path, tmp_path: Path
) -> None:
    """Breaks if the generic rules, over the TTFT/ITL counters the daemon exports,
    compute another SLI, page late, early, or not at all, or their page is labelled
    otherwise than the daemon's or names the SLO by a bare "ttft" or "itl"."""
    test_file = tmp_path / "stream.test.yml"
    test_file.write_text(
        yaml.safe_dump(
            {"rule_files": [str(rule_file)], "evaluation_interval": "10m", "tests": [_case(*case)]},
            allow_unicode=True,
        )
    )
    result = subprocess.run(
        ["promtool", "test", "rules", str(test_file)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
