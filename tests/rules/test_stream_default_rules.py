"""The stream defaults reach Prometheus through what the daemon exports: a model the
config says streams exports TTFT and ITL at their defaults and no whole-request latency;
a model that may stream (``auto``) exports its default latency SLO only until its canary
is found to stream, then stops (the daemon drops that SLO), so the generic rules stop
judging it as the daemon does. promtool runs the rules over the daemon's own series,
minute by minute, the latency series going stale as Prometheus marks a series gone."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from sli_support import Render, StreamingDaemon, promtool_series

from tritonwatch.commands.rules.generate import render_config_rules
from tritonwatch.config import parse_config
from tritonwatch.records.observations import CanaryResult, Outcome

pytestmark = pytest.mark.real

CONFIG = parse_config(
    """
targets:
  - name: llm
    url: http://127.0.0.1:1
    models:
      - {name: gen}
      - {name: chat, canary: {stream: {mode: on}}}
""",
    "defaults.yaml",
)
"""No ``slo`` section: ``gen`` may stream (``auto``), ``chat`` surely does."""
GEN, CHAT = ("llm", "gen", "http"), ("llm", "chat", "http")
PLAIN_MINUTES = STREAM_MINUTES = 30
WHOLE_STREAM = 0.095
"""16 tokens, the first after 20 ms, then one every 5 ms: within TTFT and ITL, twice
the 50 ms latency default."""
HEALTHY_GAPS = (0.005,) * 15


def _key(name: str, model: str, slo: str) -> str:
    return f'{name}{{model="{model}",slo="{slo}",target="llm"}}'


def _slos(render: Render, model: str) -> set[str]:
    """The SLOs whose series ``render`` holds for ``model``."""
    return {key.split('slo="')[1].split('"')[0] for key in render if f'model="{model}"' in key}


def _daemon() -> StreamingDaemon:
    daemon = StreamingDaemon(CONFIG)
    daemon.canary.declare([GEN, CHAT])
    daemon.streams.declare([CHAT])
    return daemon


def _plain_minute(daemon: StreamingDaemon) -> None:
    """gen's canary before it is found to stream: 60 plain requests, each a whole stream."""
    for _ in range(60):
        daemon.canary.record(CanaryResult(*GEN, daemon.now, Outcome.SUCCESS, WHOLE_STREAM))


def _stream_minute(daemon: StreamingDaemon) -> None:
    """gen's streaming canary: 60 healthy streams."""
    for _ in range(60):
        daemon.stream(*GEN, 0.020, HEALTHY_GAPS)


def _tick(daemon: StreamingDaemon) -> None:
    daemon.now += 60.0
    daemon.evaluator.evaluate()


def test_a_stream_exports_ttft_and_itl_at_their_defaults_and_no_latency() -> None:
    """Breaks if a model that surely streams exports a latency SLO it is not judged by,
    or TTFT/ITL at other objectives than the defaults (99 %) or counted at other
    thresholds than theirs (2 s, 200 ms: a value at it good, just above it bad)."""
    daemon = _daemon()
    for ttft, gap in ((2.0, 0.2), (2.001, 0.2001), (0.5, 0.01)):
        daemon.stream(*CHAT, ttft, (gap, gap))
    render = daemon.exported()
    assert _slos(render, "chat") == {"availability", "ttft", "itl"}
    assert render[_key("tritonwatch_slo_objective_ratio", "chat", "ttft")] == 0.99
    assert render[_key("tritonwatch_slo_objective_ratio", "chat", "itl")] == 0.99
    assert render[_key("tritonwatch_slo_events_total", "chat", "ttft")] == 3
    assert render[_key("tritonwatch_slo_good_events_total", "chat", "ttft")] == 2
    assert render[_key("tritonwatch_slo_events_total", "chat", "itl")] == 6
    assert render[_key("tritonwatch_slo_good_events_total", "chat", "itl")] == 4


def test_a_model_found_streaming_stops_exporting_its_default_latency_slo() -> None:
    """Breaks if the daemon keeps exporting the default latency SLO (events, objective,
    gate) of a model once its canary streams, or stops before, or exports no TTFT/ITL
    SLO for it then."""
    daemon = _daemon()
    _plain_minute(daemon)
    _tick(daemon)
    before = daemon.exported()
    assert _slos(before, "gen") == {"latency", "availability"}
    assert before[_key("tritonwatch_slo_events_total", "gen", "latency")] == 60
    assert before[_key("tritonwatch_slo_good_events_total", "gen", "latency")] == 0
    daemon.streams.declare([GEN, CHAT])  # the plain canary read decoupled and handed over
    _stream_minute(daemon)
    _tick(daemon)
    after = daemon.exported()
    assert daemon.kinds("gen") == {"availability", "ttft", "itl"}
    assert _slos(after, "gen") == {"availability", "ttft", "itl"}
    assert not [key for key in after if 'slo="latency"' in key]


def _run() -> tuple[list[Render], list[set[str]]]:
    """gen plain for 30 minutes, then found streaming for 30: the daemon's SLI series at
    minute 0 … 60, and the SLOs whose page the daemon holds for gen after each minute."""
    daemon = _daemon()
    renders, pages = [daemon.exported()], []
    for minute in range(PLAIN_MINUTES + STREAM_MINUTES):
        if minute == PLAIN_MINUTES:
            daemon.streams.declare([GEN, CHAT])
        (_plain_minute if minute < PLAIN_MINUTES else _stream_minute)(daemon)
        _tick(daemon)
        renders.append(daemon.exported())
        pages.append(
            {
                str(s.spec.kind)
                for s in daemon.evaluator.statuses()
                if s.spec.model == "gen" and s.firing is not None and s.firing.severity == "page"
            }
        )
    return renders, pages


def _case(renders: list[Render], eval_minutes: list[int], pages: list[set[str]]) -> dict[str, Any]:
    gen_pages = 'ALERTS{alertname="TritonSLOBurn",model="gen",severity="page"}'
    return {
        "name": "gen's default latency SLO while it answers plain requests, then once it streams",
        "interval": "1m",
        "input_series": promtool_series(renders),
        "promql_expr_test": [
            {
                "expr": f"count by (slo) ({gen_pages})",
                "eval_time": f"{minute}m",
                "exp_samples": [
                    {"labels": f'{{slo="{slo}"}}', "value": 1} for slo in sorted(pages[minute - 1])
                ],
            }
            for minute in eval_minutes
        ]
        + [
            # The stale latency ratio fades as its window passes; nothing judges it.
            {
                "expr": 'round(100 * tritonwatch:slo_sli_error:ratio_rate1h{model="gen",slo="latency"})',
                "eval_time": f"{PLAIN_MINUTES + 5}m",
                "exp_samples": [
                    {"labels": '{model="gen",slo="latency",target="llm"}', "value": 100}
                ],
            },
            {
                "expr": 'tritonwatch:slo_objective:ratio{model="gen",slo="latency"}',
                "eval_time": f"{PLAIN_MINUTES + 1}m",
                "exp_samples": [],
            },
        ],
    }


def test_the_rules_stop_judging_the_latency_of_a_model_found_streaming(tmp_path: Path) -> None:
    """Breaks if Prometheus pages a model the canary streams from on the whole stream
    against the default 50 ms once the daemon no longer judges it so, or if it does not
    page that latency while the model answers plain requests (the daemon does), in step
    with the daemon's own pages."""
    renders, pages = _run()
    # What the daemon holds: the latency page while plain, nothing once streaming.
    assert pages[PLAIN_MINUTES - 1] == {"latency"}
    assert all(not held for held in pages[PLAIN_MINUTES:])
    rules = tmp_path / "defaults.rules.yml"
    rules.write_text(render_config_rules(CONFIG))
    eval_minutes = [5, 15, PLAIN_MINUTES, PLAIN_MINUTES + 1, PLAIN_MINUTES + 10, 60]
    test_file = tmp_path / "defaults.test.yml"
    test_file.write_text(
        yaml.safe_dump(
            {
                "rule_files": [str(rules)],
                "evaluation_interval": "1m",
                "tests": [_case(renders, eval_minutes, pages)],
            }
        )
    )
    result = subprocess.run(
        ["promtool", "test", "rules", str(test_file)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
