"""deploy/prometheus/prometheus.yml: promtool accepts it, with or without rule files, and
it scrapes the daemon, loads the generated rules and alerts through Alertmanager."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from support import REPO

pytestmark = pytest.mark.real

PROMETHEUS_DIR = REPO / "deploy" / "prometheus"
CONFIG = PROMETHEUS_DIR / "prometheus.yml"


def _check(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["promtool", "check", "config", str(config)], capture_output=True, text=True
    )


def test_promtool_accepts_the_config_and_its_rule_files() -> None:
    """promtool accepts prometheus.yml and finds every committed rule file."""
    checked = _check(CONFIG)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    rule_files = sorted((PROMETHEUS_DIR / "rules").glob("*.yml"))
    assert f"{len(rule_files)} rule files found" in checked.stdout + checked.stderr


def test_promtool_accepts_the_config_before_any_rule_file_exists(tmp_path: Path) -> None:
    """The rules are generated later (tritonwatch rules): a glob matching nothing is fine."""
    shutil.copy(CONFIG, tmp_path / "prometheus.yml")
    checked = _check(tmp_path / "prometheus.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_scrapes_the_daemon_loads_rules_and_alerts() -> None:
    """Prometheus scrapes the daemon's /metrics, loads rules/*.yml and alerts Alertmanager."""
    config = yaml.safe_load(CONFIG.read_text())
    assert config["rule_files"] == ["rules/*.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = [t for sc in jobs["tritonwatch"]["static_configs"] for t in sc["targets"]]
    assert targets == ["tritonwatch:9849"]
    assert jobs["tritonwatch"].get("metrics_path", "/metrics") == "/metrics"
    managers = config["alerting"]["alertmanagers"]
    assert [t for m in managers for sc in m["static_configs"] for t in sc["targets"]] == [
        "alertmanager:9093"
    ]
