"""``tritonwatch rules``: the committed rule file, promtool's checks and unit tests, the CLI."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from support import REPO
from tritonwatch.analysis.slo import BURN_POLICY, WINDOWS, SLOKind, SLOSpec, SLOStatus, Source
from tritonwatch.config import load_config, parse_config
from tritonwatch.export.alerts import slo_burn_alert
from tritonwatch.export.canary_metrics import CanaryCollector
from tritonwatch.observations import CanaryResult, Outcome
from tritonwatch.probe.canary_stats import CanaryStats, latency_buckets
from tritonwatch.rules import cli
from tritonwatch.rules.generate import le_label, render_config_rules

DEMO = REPO / "examples" / "demo.yaml"
COMMITTED = REPO / "deploy" / "prometheus" / "rules" / "tritonwatch-slo.rules.yml"
RULE_TESTS = sorted((REPO / "deploy" / "prometheus" / "tests").glob("*.test.yml"))
FLEET = """
slo: {period: 30d}
targets:
  - name: a
    url: http://h:8000
    models:
      - {name: resnet50, slo: {latency: {threshold: 1s, objective: 0.99}}}
      - {name: 'bert "large"', slo: {latency: {threshold: 250ms}}}
  - name: b
    url: grpc://h:8001
    models: [{name: resnet50}]
"""


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120)


def test_committed_rules_are_what_the_demo_config_generates() -> None:
    """Regenerate with: tritonwatch rules --config examples/demo.yaml --out <committed file>."""
    assert COMMITTED.read_text() == render_config_rules(load_config(DEMO))


def test_promtool_accepts_the_committed_and_a_fleet_rule_file(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.rules.yml"
    fleet.write_text(render_config_rules(parse_config(FLEET, "fleet.yaml")))
    result = _promtool("check", "rules", str(COMMITTED), str(fleet))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 32 rules found" in result.stdout
    assert "SUCCESS: 96 rules found" in result.stdout


@pytest.mark.parametrize("case_file", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_rule_unit_tests_pass(case_file: Path) -> None:
    """Page fires, ticket fires, and neither fires just below its threshold."""
    result = _promtool("test", "rules", str(case_file))
    assert result.returncode == 0, result.stdout + result.stderr


def test_both_page_and_ticket_cases_are_there() -> None:
    assert {p.name for p in RULE_TESTS} == {
        "tritonwatch-slo-page.test.yml",
        "tritonwatch-slo-ticket.test.yml",
    }


@pytest.mark.parametrize("threshold", [0.05, 1.0, 0.25, 0.1, 0.3, 2.0, 0.0125, 0.075])
def test_le_is_written_as_the_exporter_writes_it(threshold: float) -> None:
    """The rule's ``le`` must match the exported bucket character for character."""
    stats = CanaryStats(latency_buckets([threshold]))
    stats.declare([("t", "m", "http")])
    stats.record(CanaryResult("t", "m", "http", 0.0, Outcome.SUCCESS, threshold))
    registry = CollectorRegistry()
    registry.register(CanaryCollector(stats, clock=lambda: 0.0))
    exposition = generate_latest(registry).decode()
    assert f'le="{le_label(threshold)}"' in exposition


def test_quotes_in_names_are_escaped_for_promql() -> None:
    text = render_config_rules(parse_config(FLEET, "fleet.yaml"))
    assert 'model="bert \\"large\\""' in text


def test_alert_labels_match_the_daemons_alert() -> None:
    """Prometheus and the daemon send TritonSLOBurn with one label set, so Alertmanager
    merges the two paths into one alert."""
    groups = yaml.safe_load(render_config_rules(load_config(DEMO)))["groups"]
    alerts = [rule for group in groups for rule in group["rules"] if "alert" in rule]
    assert len(alerts) == 4
    spec = SLOSpec("local", "simple", SLOKind.LATENCY, 0.95, 28 * 86400.0, 0.05)
    for condition in BURN_POLICY:
        status = SLOStatus(spec, Source.CANARY, dict.fromkeys(WINDOWS, 1.0), None, condition)
        daemon_alert = slo_burn_alert(status)
        assert daemon_alert is not None
        rule = next(
            a
            for a in alerts
            if a["labels"]["slo"] == "latency" and a["labels"]["severity"] == condition.severity
        )
        assert dict(daemon_alert.labels) == {"alertname": rule["alert"], **rule["labels"]}


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tritonwatch")
    commands = parser.add_subparsers(dest="command", required=True)
    cli.register(commands)
    args = parser.parse_args(argv)
    status: int = args.handler(args)
    return status


def test_cli_writes_the_file_or_standard_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rules.yml"
    assert _run(["rules", "--config", str(DEMO), "--out", str(out)]) == 0
    assert out.read_text() == COMMITTED.read_text()
    assert capsys.readouterr().out.startswith("wrote 2 rule groups to")  # and a summary
    assert _run(["rules", "--config", str(DEMO)]) == 0
    assert capsys.readouterr().out == COMMITTED.read_text()


def test_cli_reads_the_config_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TRITONWATCH_CONFIG", str(DEMO))
    assert _run(["rules"]) == 0
    assert capsys.readouterr().out.startswith("# Generated by `tritonwatch rules`")


def test_cli_reports_a_bad_config_with_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("targets: []\n")
    assert _run(["rules", "--config", str(bad)]) == 2
    assert "bad.yaml: targets" in capsys.readouterr().err
