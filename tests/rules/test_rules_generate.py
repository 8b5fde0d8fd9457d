"""``tritonwatch rules``: the committed rule file, promtool's checks and unit tests, one
rule set whatever the number of models, the alert's labels against the daemon's own, the
CLI. (The committed rules over a real daemon's series: test_rules_daemon_series.py.)"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest
import yaml

from support import REPO
from tritonwatch.analysis.slo import BURN_POLICY, WINDOWS, SliSource, SLOKind, SLOSpec, SLOStatus
from tritonwatch.commands.rules import cli
from tritonwatch.commands.rules.capacity import CAPACITY_GROUP
from tritonwatch.commands.rules.generate import SLO_GROUP, render_config_rules
from tritonwatch.commands.rules.health import HEALTH_GROUP
from tritonwatch.config import load_config, parse_config
from tritonwatch.config.schema import Config
from tritonwatch.export.alerts import SLO_BURN, slo_burn_alert

pytestmark = pytest.mark.real

DEMO = REPO / "examples" / "demo.yaml"
COMMITTED = REPO / "deploy" / "prometheus" / "rules" / "tritonwatch-slo.rules.yml"
RULE_TESTS = sorted((REPO / "deploy" / "prometheus" / "tests").glob("*.test.yml"))
SLO_RULES = 23
"""3 records of objectives and gates, 7 error ratios and 7 burn rates (5m … 3d), the
events of the 4 long windows, the page and the ticket."""
ALL_RULES = SLO_RULES + 5 + 1  # tritonwatch-health, tritonwatch-capacity
FLEET = """
slo: {period: 30d, alert_min_bad_events: 3}
targets:
  - name: a
    url: http://h:8000
    models:
      - {name: resnet50, slo: {latency: {threshold: 1s, objective: 0.99}}}
      - {name: 'bert "large"', slo: {latency: {threshold: 250ms}, alert_min_bad_events: 0}}
      - {name: gen, canary: {stream: {mode: on}}, slo: {ttft: {threshold: 1s}}}
  - name: b
    url: grpc://h:8001
    models: [{name: resnet50}]
"""
"""Targets, models and SLOs unlike the demo's, per-model overrides included."""


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120)


def _groups(text: str) -> dict[str, list[dict[str, object]]]:
    return {group["name"]: group["rules"] for group in yaml.safe_load(text)["groups"]}


def _models_config(count: int) -> str:
    """A config of ``count`` models on one target, every one with its own objectives."""
    lines = ["targets:", "  - name: fleet", "    url: http://h:8000", "    models:"]
    lines += [
        f"      - {{name: m{i}, slo: {{availability: {{objective: 0.99{i % 10}}}, "
        f"latency: {{threshold: {10 + i}ms, objective: 0.9{i % 9}}}}}}}"
        for i in range(count)
    ]
    return "\n".join(lines) + "\n"


def test_committed_rules_are_what_the_demo_config_generates() -> None:
    """Breaks if the committed file drifts from `tritonwatch rules --config examples/demo.yaml`."""
    # Only drift (regenerate with --out <committed file>); that the rules are right is
    # checked by promtool over the unit tests and over a real daemon's series.
    assert COMMITTED.read_text() == render_config_rules(load_config(DEMO))


def test_promtool_accepts_the_committed_rules_and_counts_them() -> None:
    """Breaks if promtool refuses the committed rules or their count changes."""
    result = _promtool("check", "rules", str(COMMITTED))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {ALL_RULES} rules found" in result.stdout
    groups = _groups(COMMITTED.read_text())
    assert list(groups) == [SLO_GROUP, HEALTH_GROUP, CAPACITY_GROUP]
    assert len(groups[SLO_GROUP]) == SLO_RULES


def test_one_model_and_a_thousand_get_the_same_rules() -> None:
    """Breaks if the rule set grows with the models, or reads their names or objectives:
    a config of 1 model and one of 1 000 (each with its own objectives) write the same
    text, and neither names a model."""
    one = parse_config(_models_config(1), "one.yaml")
    thousand = parse_config(_models_config(1000), "thousand.yaml")
    assert len(thousand.targets[0].models) == 1000
    objectives = {thousand.slo_for(m).availability.objective for m in thousand.targets[0].models}
    assert len(objectives) == 10  # the models do differ
    text = render_config_rules(thousand)
    assert text == render_config_rules(one)
    assert sum(len(rules) for rules in _groups(text).values()) == ALL_RULES
    assert "m999" not in text and "m0" not in text and "fleet" not in text


def test_the_slo_group_depends_on_no_model_and_the_others_on_their_sections() -> None:
    """Breaks if targets, models or SLOs (per-model overrides included) change the rules,
    or if the sections that are not per model stop reaching the health and capacity
    groups: alerting.not_serving_for, alerting.exporter_job, capacity."""
    demo = render_config_rules(load_config(DEMO))
    assert render_config_rules(parse_config(FLEET, "fleet.yaml")) == demo
    assert render_config_rules(Config()) == demo  # no config: what the demo writes
    tuned = parse_config(
        DEMO.read_text()
        + "alerting: {not_serving_for: 3m, exporter_job: tw}\n"
        + "capacity: {headroom_alert: 0.35, alert_for: 5m}\n",
        "tuned.yaml",
    )
    groups, defaults = _groups(render_config_rules(tuned)), _groups(demo)
    assert groups[SLO_GROUP] == defaults[SLO_GROUP]
    health, capacity = yaml.safe_dump(groups[HEALTH_GROUP]), yaml.safe_dump(groups[CAPACITY_GROUP])
    assert health != yaml.safe_dump(defaults[HEALTH_GROUP])
    assert "for: 3m" in health and 'job="tw"' in health
    assert "0.35" in capacity and "for: 5m" in capacity


@pytest.mark.parametrize("case_file", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_rule_unit_tests_pass(case_file: Path) -> None:
    """Page fires, ticket fires, and neither fires just below its threshold, per model's
    objective and gate."""
    result = _promtool("test", "rules", str(case_file))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_rule_test_file_is_there() -> None:
    """Breaks if the page, ticket, min-events, health or capacity rule test file is gone,
    or a stray one appears."""
    assert {p.name for p in RULE_TESTS} == {
        "tritonwatch-slo-page.test.yml",
        "tritonwatch-slo-ticket.test.yml",
        "tritonwatch-slo-min-events.test.yml",
        "tritonwatch-health.test.yml",
        "tritonwatch-capacity.test.yml",
    }


def test_every_slo_rule_test_judges_two_models_with_different_objectives() -> None:
    """Breaks if an SLO rule test file stops feeding, in each of its cases, two models
    whose exported objectives differ (the generic rules must judge each by its own)."""
    for path in RULE_TESTS:
        if not path.name.startswith("tritonwatch-slo-"):
            continue
        for case in yaml.safe_load(path.read_text())["tests"]:
            objectives = {
                (series["series"].split('model="')[1].split('"')[0], series["values"].split("x")[0])
                for series in case["input_series"]
                if series["series"].startswith("tritonwatch_slo_objective_ratio{")
            }
            models = {model for model, _ in objectives}
            assert len(models) >= 2, (path.name, case["name"])
            assert len({objective for _, objective in objectives}) >= 2, (path.name, case["name"])


def test_alert_labels_match_the_daemons_alert(tmp_path: Path) -> None:
    """Prometheus and the daemon send TritonSLOBurn with one label set, so Alertmanager
    merges the two paths into one alert: promtool fires the committed page and ticket on
    a total outage, and their ALERTS series carry exactly the daemon's labels (target,
    model and slo from the expression, severity and source the rule's own)."""
    spec = SLOSpec("local", "simple", SLOKind.LATENCY, 0.95, 28 * 86400.0, 0.05)
    expected = set()
    for condition in BURN_POLICY:
        status = SLOStatus(spec, SliSource.CANARY, dict.fromkeys(WINDOWS, 1.0), None, condition)
        daemon_alert = slo_burn_alert(status)
        assert daemon_alert is not None
        labels = {**dict(daemon_alert.labels), "alertstate": "firing"}
        expected.add(",".join(f'{k}="{v}"' for k, v in sorted(labels.items())))
    assert len(expected) == 2  # a page and a ticket
    alerts = [
        r for rules in _groups(COMMITTED.read_text()).values() for r in rules if r.get("alert")
    ]
    assert [a["alert"] for a in alerts if a["alert"] == SLO_BURN] == [SLO_BURN, SLO_BURN]
    selector = 'target="local",model="simple",slo="latency"'
    series = {
        "tritonwatch_slo_events_total": "0 1000",
        "tritonwatch_slo_good_events_total": "0 0",
        "tritonwatch_slo_objective_ratio": "0.95 0.95",
        "tritonwatch_slo_alert_min_bad_events": "0 0",
    }
    case = {
        "interval": "1m",
        "input_series": [
            {"series": f"{name}{{{selector}}}", "values": values} for name, values in series.items()
        ],
        "promql_expr_test": [
            {
                "expr": f'ALERTS{{alertname="{SLO_BURN}"}}',
                "eval_time": "1m",
                "exp_samples": [{"labels": f"ALERTS{{{s}}}", "value": 1} for s in sorted(expected)],
            }
        ],
    }
    test_file = tmp_path / "labels.test.yml"
    test_file.write_text(
        yaml.safe_dump(
            {"rule_files": [str(COMMITTED)], "evaluation_interval": "1m", "tests": [case]}
        )
    )
    result = _promtool("test", "rules", str(test_file))
    assert result.returncode == 0, result.stdout + result.stderr


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tritonwatch")
    commands = parser.add_subparsers(dest="command", required=True)
    cli.register(commands)
    args = parser.parse_args(argv)
    status: int = args.handler(args)
    return status


def test_cli_writes_the_file_or_standard_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Breaks if `rules` stops writing the committed file with --out (then naming its
    groups and listing the config's SLOs), or it to standard output."""
    monkeypatch.setenv("COLUMNS", "400")  # the title on one line, however long tmp_path is
    out = tmp_path / "rules.yml"
    assert _run(["rules", "--config", str(DEMO), "--out", str(out)]) == 0
    assert out.read_text() == COMMITTED.read_text()
    title, *lines = capsys.readouterr().out.splitlines()
    assert title == (
        f"wrote 3 rule groups to {out} ({SLO_GROUP}: {SLO_RULES} rules for every model, "
        f"{HEALTH_GROUP}, {CAPACITY_GROUP}); the config's SLOs reach them as the daemon's series:"
    )
    rows = [line.split() for line in lines if line.startswith("local/simple")]
    assert [row[:3] for row in rows] == [
        ["local/simple", "latency", "95"],
        ["local/simple", "availability", "99.9"],
    ]
    assert _run(["rules", "--config", str(DEMO)]) == 0
    assert capsys.readouterr().out == COMMITTED.read_text()


def test_cli_without_a_config_writes_the_same_rules(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Breaks if `rules` needs a config, or writes other rules without one than with the
    demo's (which sets none of alerting and capacity)."""
    monkeypatch.delenv("TRITONWATCH_CONFIG", raising=False)
    assert _run(["rules"]) == 0
    assert capsys.readouterr().out == COMMITTED.read_text()


def test_cli_reads_the_config_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Breaks if `rules` stops taking its config from TRITONWATCH_CONFIG."""
    config = tmp_path / "runbook.yaml"
    config.write_text(DEMO.read_text() + "alerting: {runbook_url: 'https://wiki/tw'}\n")
    monkeypatch.setenv("TRITONWATCH_CONFIG", str(config))
    assert _run(["rules"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Generated by `tritonwatch rules`")
    assert "runbook_url: https://wiki/tw#tritonsloburn" in out


def test_cli_reports_a_bad_config_with_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Breaks if `rules` on a bad config does not exit 2 naming file and field."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("targets: []\n")
    assert _run(["rules", "--config", str(bad)]) == 2
    assert "bad.yaml: targets" in capsys.readouterr().err
