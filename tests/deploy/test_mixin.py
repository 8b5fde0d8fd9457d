"""mixin/: the monitoring mixin, as Prometheus, Grafana and Prometheus Operator consume it.

Its files are written by mixin/build.py from the same code as everything else (the
rules `tritonwatch rules` makes of mixin/config.yaml, the dashboards of
grafana/dashboards), split the way mixins are laid out: recording rules, alerting rules,
one PrometheusRule with both, dashboards_out/. These tests hold the committed files to
that code, run promtool over them (the checks, and mixin/tests/*.test.yml, which must
fire every alert the mixin carries), and check every alert's annotations and that its
runbook link lands on a heading of docs/runbook.md: an alert that pages someone at night
must say what broke and where to read what to do.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from support import REPO
from tritonwatch.commands.rules.generate import render_config_rules
from tritonwatch.config import load_config
from tritonwatch.dashboards import render_all

pytestmark = pytest.mark.real

MIXIN = REPO / "mixin"
RULES = MIXIN / "prometheus_rules.yaml"
ALERTS = MIXIN / "prometheus_alerts.yaml"
PROMETHEUS_RULE = MIXIN / "prometheus_rule.yaml"
RULE_TESTS = sorted((MIXIN / "tests").glob("*.test.yml"))
RUNBOOK = REPO / "docs" / "runbook.md"
ANNOTATIONS = ("summary", "description", "runbook_url")
Rule = dict[str, Any]


def _build() -> ModuleType:
    """mixin/build.py, imported by path (mixin/ is no package)."""
    spec = importlib.util.spec_from_file_location("mixin_build", MIXIN / "build.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and typing look modules up by name
    spec.loader.exec_module(module)
    return module


build = _build()


def _groups(path: Path) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(path.read_text())["groups"]
    return groups


def _alerts() -> list[Rule]:
    return [rule for group in _groups(ALERTS) for rule in group["rules"]]


def _promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def heading_ids(markdown: str) -> set[str]:
    """The anchors MkDocs gives the headings of ``markdown`` (its toc extension's slugify:
    ASCII, word characters, spaces and hyphens kept, lowercased, runs of both → ``-``);
    lines inside fenced code blocks are not headings."""
    ids = set()
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or heading is None:
            continue
        text = unicodedata.normalize("NFKD", heading[1]).encode("ascii", "ignore").decode()
        text = re.sub(r"[^\w\s-]", "", text).strip().lower()
        ids.add(re.sub(r"[-\s]+", "-", text))
    return ids


def alert_problems(alerts: Iterable[Rule], runbook_base: str, anchors: set[str]) -> list[str]:
    """What is wrong with each alert's annotations: a missing or empty summary,
    description or runbook_url, a runbook_url off ``runbook_base``, an anchor that is no
    heading (``anchors``)."""
    problems = []
    for rule in alerts:
        name = rule["alert"]
        annotations = rule.get("annotations", {})
        problems += [
            f"{name}: no {key}" for key in ANNOTATIONS if not str(annotations.get(key, "")).strip()
        ]
        url = str(annotations.get("runbook_url", ""))
        base, _, anchor = url.partition("#")
        if url and base != runbook_base:
            problems.append(f"{name}: runbook_url {url} is not under {runbook_base}")
        if url and anchor not in anchors:
            problems.append(f"{name}: runbook_url {url}: no heading #{anchor} in the runbook")
    return problems


def fired(test_files: Iterable[Path]) -> list[tuple[str, dict[str, str]]]:
    """(alertname, labels) of every alert an alert_rule_test of ``test_files`` expects to
    fire, each with a full set of annotations asserted (others do not count)."""
    found = []
    for path in test_files:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                for alert in case.get("exp_alerts") or []:
                    if all(alert.get("exp_annotations", {}).get(key) for key in ANNOTATIONS):
                        found.append((case["alertname"], alert.get("exp_labels", {})))
    return found


def test_the_committed_mixin_is_what_the_code_builds(capsys: pytest.CaptureFixture[str]) -> None:
    """Breaks if a file of mixin/ differs from what `python mixin/build.py` writes now."""
    assert build.main(["--check"]) == 0, capsys.readouterr().err


def test_check_names_stale_missing_and_stray_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Breaks if --check passes over an edited, a missing or a stray file, or if writing
    leaves them as they were."""
    assert build.main(["--out", str(tmp_path)]) == 0
    assert build.main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "prometheus_alerts.yaml").write_text("groups: []\n")
    (tmp_path / "prometheus_rule.yaml").unlink()
    (tmp_path / "dashboards_out" / "gone.json").write_text("{}\n")
    capsys.readouterr()
    assert build.main(["--check", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    for name in ("prometheus_alerts.yaml", "prometheus_rule.yaml", "gone.json"):
        assert name in err
    assert build.main(["--out", str(tmp_path)]) == 0
    assert build.main(["--check", "--out", str(tmp_path)]) == 0
    assert not (tmp_path / "dashboards_out" / "gone.json").exists()


def test_the_split_keeps_every_generated_rule_once_in_order() -> None:
    """Breaks if splitting the generated groups loses, repeats, reorders or mixes a rule:
    the recording file holds only records, the alerting file only alerts, and each
    generated group is its recording half followed by its alerting half."""
    config = load_config(MIXIN / "config.yaml")
    generated = yaml.safe_load(render_config_rules(config, config.alerting.runbook_url))
    recording = {group["name"]: group["rules"] for group in _groups(RULES)}
    alerting = {group["name"]: group["rules"] for group in _groups(ALERTS)}
    assert all("record" in rule for rules in recording.values() for rule in rules)
    assert all("alert" in rule for rules in alerting.values() for rule in rules)
    names = [*recording, *alerting]
    assert len(names) == len(set(names)), "a group name twice: one PrometheusRule refuses it"
    for group in generated["groups"]:
        name = group["name"]
        rules = recording.pop(name, []) + alerting.pop(name + "-alerts", [])
        rules += alerting.pop(name, []) if not rules else []
        assert rules == group["rules"], name
    assert recording == alerting == {}, "groups the generator did not make"


def test_promtool_checks_both_rule_files_and_the_prometheus_rule(tmp_path: Path) -> None:
    """Breaks if promtool refuses a rule file (syntax, PromQL, duplicates) or the
    PrometheusRule's groups as the one file Prometheus Operator makes of them."""
    spec = yaml.safe_load(PROMETHEUS_RULE.read_text())["spec"]
    operator_file = tmp_path / "prometheus_rule.rules.yaml"
    operator_file.write_text(yaml.safe_dump(spec))
    checked = _promtool("check", "rules", str(RULES), str(ALERTS), str(operator_file))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    records = sum(len(group["rules"]) for group in _groups(RULES))
    assert f"SUCCESS: {records} rules found" in checked.stdout
    assert f"SUCCESS: {len(_alerts())} rules found" in checked.stdout
    assert f"SUCCESS: {records + len(_alerts())} rules found" in checked.stdout


def test_promtool_rule_unit_tests_pass() -> None:
    """Breaks if an alert of the mixin fires when it should not, or not as asserted, in
    mixin/tests/*.test.yml (both rule files loaded together)."""
    assert RULE_TESTS, "no mixin/tests/*.test.yml"
    result = _promtool("test", "rules", *(p.name for p in RULE_TESTS), cwd=MIXIN / "tests")
    assert result.returncode == 0, result.stdout + result.stderr


def test_rule_tests_load_both_files_and_evaluate_recordings_first() -> None:
    """Breaks if a promtool test file leaves a rule file out, or its group_eval_order
    misses a group or puts an alerting group before a recording one (a stale read that
    would pass or fail by chance)."""
    recording = [group["name"] for group in _groups(RULES)]
    alerting = [group["name"] for group in _groups(ALERTS)]
    for path in RULE_TESTS:
        document = yaml.safe_load(path.read_text())
        assert document["rule_files"] == ["../prometheus_rules.yaml", "../prometheus_alerts.yaml"]
        order = document["group_eval_order"]
        assert sorted(order[: len(recording)]) == sorted(recording), path.name
        assert sorted(order[len(recording) :]) == sorted(alerting), path.name


def test_every_alert_is_fired_by_a_rule_test_with_its_labels_and_annotations() -> None:
    """Breaks if an alerting rule (name and static labels: the page and the ticket of each
    SLO apart) is fired by no promtool test that asserts its labels and annotations."""
    expected = fired(RULE_TESTS)
    missing = [
        f"{rule['alert']} {rule.get('labels', {})}"
        for rule in _alerts()
        if not any(
            name == rule["alert"] and rule.get("labels", {}).items() <= labels.items()
            for name, labels in expected
        )
    ]
    assert not missing, f"fired by no test in mixin/tests: {missing}"


def test_every_alert_says_what_broke_and_links_a_runbook_heading() -> None:
    """Breaks if an alert lacks a summary, description or runbook_url, or its runbook_url
    is off the config's runbook base or names no heading of docs/runbook.md."""
    base = load_config(MIXIN / "config.yaml").alerting.runbook_url
    assert base == "docs/runbook.md"
    problems = alert_problems(_alerts(), base, heading_ids(RUNBOOK.read_text()))
    assert not problems


def test_the_annotation_check_catches_a_missing_anchor_and_annotation() -> None:
    """Breaks if the helper the check above uses lets through an alert whose runbook
    anchor is no heading, or one with an empty description (a planted bug)."""
    anchors = heading_ids(RUNBOOK.read_text())
    assert {"tritonsloburn", "tritonserverdown", "tritonwatchabsent"} <= anchors
    good = {"summary": "s", "description": "d", "runbook_url": "docs/runbook.md#tritonsloburn"}
    planted = [
        {"alert": "Good", "annotations": good},
        {"alert": "NoAnchor", "annotations": {**good, "runbook_url": "docs/runbook.md#nosuch"}},
        {"alert": "Empty", "annotations": {**good, "description": " "}},
        {"alert": "Elsewhere", "annotations": {**good, "runbook_url": "wiki#tritonsloburn"}},
    ]
    problems = alert_problems(planted, "docs/runbook.md", anchors)
    assert [p.split(":")[0] for p in problems] == ["NoAnchor", "Empty", "Elsewhere"]
    assert heading_ids("# Top\n```sh\n# not a heading\n```\n## Canary outcomes!\n") == {
        "top",
        "canary-outcomes",
    }


def test_the_prometheus_rule_holds_both_files_groups() -> None:
    """Breaks if the PrometheusRule's groups differ from the two rule files' (recordings
    first), or it is no monitoring.coreos.com/v1 PrometheusRule."""
    document = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert document["apiVersion"] == "monitoring.coreos.com/v1"
    assert document["kind"] == "PrometheusRule"
    assert document["metadata"]["name"]
    assert document["spec"]["groups"] == _groups(RULES) + _groups(ALERTS)


def test_the_prometheus_rule_passes_the_operators_crd_schema() -> None:
    """Breaks if an API server would refuse the PrometheusRule, or silently prune a field
    of it, under the Prometheus Operator CRD vendored in tests/fixtures."""
    from test_kubernetes_schemas import crd_errors

    assert crd_errors(yaml.safe_load(PROMETHEUS_RULE.read_text())) == []


def test_the_dashboards_are_the_committed_ones_and_what_the_code_builds() -> None:
    """Breaks if mixin/dashboards_out differs from grafana/dashboards or from the
    dashboards code, byte for byte, or holds a dashboard the code does not build."""
    built = render_all()
    out = {p.name: p.read_text(encoding="utf-8") for p in (MIXIN / "dashboards_out").glob("*")}
    committed = {
        p.name: p.read_text(encoding="utf-8") for p in (REPO / "grafana/dashboards").glob("*.json")
    }
    assert out == built
    assert out == committed
