"""``tritonwatch rules``: the committed rule file, promtool's checks and unit tests, the
committed rules evaluated by promtool over a real daemon's series, the CLI."""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from support import REPO, DaemonProcess, wait_until
from tritonwatch.analysis.slo import BURN_POLICY, WINDOWS, SliSource, SLOKind, SLOSpec, SLOStatus
from tritonwatch.commands.rules import cli
from tritonwatch.commands.rules.generate import le_label, render_config_rules
from tritonwatch.config import load_config, parse_config
from tritonwatch.export.alerts import SLO_BURN, slo_burn_alert
from tritonwatch.export.canary_metrics import CanaryCollector
from tritonwatch.records.observations import CanaryResult, Outcome
from tritonwatch.state.canary_board import CanaryBoard, latency_buckets

pytestmark = pytest.mark.real

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
    """Breaks if the committed file drifts from `tritonwatch rules --config examples/demo.yaml`."""
    # Only drift (regenerate with --out <committed file>); that the rules are right is
    # checked against the daemon's own series by the promtool test below.
    assert COMMITTED.read_text() == render_config_rules(load_config(DEMO))


_CANARY_COUNTERS = (
    "tritonwatch_canary_requests_total",
    "tritonwatch_canary_latency_seconds_bucket",
    "tritonwatch_canary_latency_seconds_count",
)
"""What the SLO rules read."""
Series = tuple[str, frozenset[tuple[str, str]]]


def _canary_counters(exposition: str) -> dict[Series, float]:
    """The canary counters of the demo's model in a /metrics text, by name and labels."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (sample.name, frozenset(sample.labels.items())): float(sample.value)
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name in _CANARY_COUNTERS
        and (sample.labels.get("target"), sample.labels.get("model")) == ("local", "simple")
    }


def _requests(counters: dict[Series, float]) -> float:
    return sum(v for (name, _), v in counters.items() if name == _CANARY_COUNTERS[0])


def _two_scrapes(
    config: Path, between: Callable[[], object]
) -> tuple[dict[Series, float], dict[Series, float]]:
    """Two /metrics readings of a real daemon on ``config``, some canary traffic apart,
    with ``between`` run right after the first."""
    daemon = DaemonProcess(config)
    readings: list[dict[Series, float]] = []

    def requests_beyond(count: float) -> bool:
        readings.append(_canary_counters(daemon.metrics()))
        return _requests(readings[-1]) > count

    try:
        wait_until(lambda: requests_beyond(0), 30, "the first canary results", every=0.2)
        first = readings[-1]
        between()
        wait_until(lambda: requests_beyond(_requests(first) + 40), 30, "40 more", every=0.2)
    finally:
        assert daemon.stop() == 0
    return first, readings[-1]


def _increase(
    first: dict[Series, float], second: dict[Series, float], name: str, **labels: str
) -> float:
    """How much every ``name`` series with ``labels`` among its labels grew, summed."""
    return sum(
        value - first.get((series_name, series_labels), 0.0)
        for (series_name, series_labels), value in second.items()
        if series_name == name and set(labels.items()) <= series_labels
    )


def _input_series(first: dict[Series, float], second: dict[Series, float]) -> list[dict[str, str]]:
    """Each series at its first reading for 5 minutes, then its second: a 5-minute rate
    at minute 5 is then exactly (second - first) / 300 s, without extrapolation."""
    series = []
    for (name, labels), value in sorted(
        second.items(), key=lambda kv: (kv[0][0], sorted(kv[0][1]))
    ):
        before = first.get((name, labels), 0.0)
        assert before.is_integer() and value.is_integer(), (name, labels, before, value)
        matchers = ",".join(f'{k}="{v}"' for k, v in sorted(labels))
        values = " ".join([str(int(before))] * 5 + [str(int(value))])
        series.append({"series": f"{name}{{{matchers}}}", "values": values})
    return series


def _close_to(expr: str, slo: str, value: float) -> dict[str, object]:
    """A promtool case: ``expr`` for the demo model's ``slo`` is ``value`` at minute 5."""
    return {
        "expr": f'abs({expr}{{slo="{slo}"}} - {value!r}) < bool 1e-9',
        "eval_time": "5m",
        "exp_samples": [{"labels": f'{{target="local",model="simple",slo="{slo}"}}', "value": 1}],
    }


def test_committed_rules_compute_the_slis_from_the_daemons_series(tmp_path: Path) -> None:
    """Breaks if the committed rules read series the daemon lacks or compute other SLIs."""
    # promtool evaluates them over two real scrapes of a daemon running the demo config.
    from tritonwatch.sim.server import Simulator

    demo = yaml.safe_load(DEMO.read_text())
    demo_config = load_config(DEMO)
    slo = demo_config.slo_for(demo_config.targets[0].models[0])
    with Simulator() as sim:
        # A quarter of the requests fail: the availability SLI is far from 0.
        sim.inject_fault(kind="error_burst", reason="BACKEND", fraction=0.25, model="simple")
        config = {**demo, "canary": {"rate": "20/s"}}
        config["targets"] = [{**demo["targets"][0], "url": sim.http_url}]
        path = tmp_path / "demo.yaml"
        path.write_text(yaml.safe_dump(config))
        # simple computes in about 1 ms; 65 times that for a second puts some requests
        # between the 50 ms threshold and the next bucket: a wrong ``le`` shows.
        first, second = _two_scrapes(
            path,
            lambda: sim.inject_fault(
                kind="latency_spike", factor=65, duration_s=1.0, model="simple"
            ),
        )

    # The SLIs by their definitions (docs/design.md §6), from the daemon's counters.
    requests = _increase(first, second, "tritonwatch_canary_requests_total")
    succeeded = _increase(first, second, "tritonwatch_canary_requests_total", outcome="success")
    timed = _increase(first, second, "tritonwatch_canary_latency_seconds_count")
    (le,) = {
        value
        for name, labels in second
        for key, value in labels
        if key == "le" and value != "+Inf" and float(value) == slo.latency.threshold
    }
    fast = _increase(first, second, "tritonwatch_canary_latency_seconds_bucket", le=le)
    assert 0 < succeeded < requests
    assert 0 < fast < timed, "some canary requests are over the threshold, some under"
    latency_error = 1 - fast / timed
    availability_error = 1 - succeeded / requests

    windows = sorted(
        {
            rule["record"]
            for group in yaml.safe_load(COMMITTED.read_text())["groups"]
            for rule in group["rules"]
            if rule.get("record", "").startswith("tritonwatch:slo_sli_error:ratio_rate")
        }
    )
    assert len(windows) == 8  # 5m, 30m, 1h, 2h, 6h, 1d, 3d, 28d
    cases = [
        _close_to("tritonwatch:slo_sli_error:ratio_rate5m", "latency", latency_error),
        _close_to("tritonwatch:slo_sli_error:ratio_rate5m", "availability", availability_error),
        _close_to(
            "tritonwatch:slo_current_burn_rate:ratio",
            "latency",
            latency_error / (1 - slo.latency.objective),
        ),
        _close_to(
            "tritonwatch:slo_current_burn_rate:ratio",
            "availability",
            availability_error / (1 - slo.availability.objective),
        ),
    ]
    # Every window's SLI exists for both SLOs (longer windows extrapolate: no exact value).
    cases += [
        {
            "expr": f"count by (target, model) (({record} >= 0) <= 1)",
            "eval_time": "5m",
            "exp_samples": [{"labels": '{target="local",model="simple"}', "value": 2}],
        }
        for record in windows
    ]
    test_file = tmp_path / "daemon-series.test.yml"
    test_file.write_text(
        yaml.safe_dump(
            {
                "rule_files": [str(COMMITTED)],
                "evaluation_interval": "1m",
                "tests": [
                    {
                        "interval": "1m",
                        "input_series": _input_series(first, second),
                        "promql_expr_test": cases,
                    }
                ],
            }
        )
    )
    result = _promtool("test", "rules", str(test_file))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_accepts_the_committed_and_a_fleet_rule_file(tmp_path: Path) -> None:
    """Breaks if promtool refuses the committed or a fleet's rules, or their counts change."""
    fleet = tmp_path / "fleet.rules.yml"
    fleet.write_text(render_config_rules(parse_config(FLEET, "fleet.yaml")))
    result = _promtool("check", "rules", str(COMMITTED), str(fleet))
    assert result.returncode == 0, result.stdout + result.stderr
    # 16 a SLO (14 records, page, ticket), and the 4 of tritonwatch-health.
    assert "SUCCESS: 38 rules found" in result.stdout
    assert "SUCCESS: 102 rules found" in result.stdout


@pytest.mark.parametrize("case_file", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_rule_unit_tests_pass(case_file: Path) -> None:
    """Page fires, ticket fires, and neither fires just below its threshold."""
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


@pytest.mark.parametrize("threshold", [0.05, 1.0, 0.25, 0.1, 0.3, 2.0, 0.0125, 0.075])
def test_le_is_written_as_the_exporter_writes_it(threshold: float) -> None:
    """The rule's ``le`` must match the exported bucket character for character."""
    stats = CanaryBoard(latency_buckets([threshold]))
    stats.declare([("t", "m", "http")])
    stats.record(CanaryResult("t", "m", "http", 0.0, Outcome.SUCCESS, threshold))
    registry = CollectorRegistry()
    registry.register(CanaryCollector(stats, clock=lambda: 0.0))
    exposition = generate_latest(registry).decode()
    assert f'le="{le_label(threshold)}"' in exposition


def test_quotes_in_names_are_escaped_for_promql() -> None:
    """Breaks if a quote in a model's name is not escaped in the PromQL label matcher."""
    text = render_config_rules(parse_config(FLEET, "fleet.yaml"))
    assert 'model="bert \\"large\\""' in text


def test_alert_labels_match_the_daemons_alert() -> None:
    """Prometheus and the daemon send TritonSLOBurn with one label set, so Alertmanager
    merges the two paths into one alert."""
    groups = yaml.safe_load(render_config_rules(load_config(DEMO)))["groups"]
    alerts = [rule for group in groups for rule in group["rules"] if rule.get("alert") == SLO_BURN]
    assert len(alerts) == 4
    spec = SLOSpec("local", "simple", SLOKind.LATENCY, 0.95, 28 * 86400.0, 0.05)
    for condition in BURN_POLICY:
        status = SLOStatus(spec, SliSource.CANARY, dict.fromkeys(WINDOWS, 1.0), None, condition)
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
    """Breaks if `rules` stops writing the committed file with --out, or it to standard output."""
    out = tmp_path / "rules.yml"
    assert _run(["rules", "--config", str(DEMO), "--out", str(out)]) == 0
    assert out.read_text() == COMMITTED.read_text()
    assert capsys.readouterr().out.startswith("wrote 4 rule groups to")  # and a summary
    assert _run(["rules", "--config", str(DEMO)]) == 0
    assert capsys.readouterr().out == COMMITTED.read_text()


def test_cli_reads_the_config_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Breaks if `rules` stops taking its config from TRITONWATCH_CONFIG."""
    monkeypatch.setenv("TRITONWATCH_CONFIG", str(DEMO))
    assert _run(["rules"]) == 0
    assert capsys.readouterr().out.startswith("# Generated by `tritonwatch rules`")


def test_cli_reports_a_bad_config_with_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Breaks if `rules` on a bad config does not exit 2 naming file and field."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("targets: []\n")
    assert _run(["rules", "--config", str(bad)]) == 2
    assert "bad.yaml: targets" in capsys.readouterr().err
