"""Sweeps and tuning load servers on purpose: a production target needs an explicit yes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from support import TRITONWATCH
from tritonwatch.config import parse_config
from tritonwatch.sim.server import Simulator
from tritonwatch.sweep.schedule import sweep_plans

pytestmark = pytest.mark.real


def _config(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "prod.yaml"
    path.write_text(
        f"targets: [{{name: prod, url: '{url}', production: true, models: [{{name: simple}}]}}]\n"
    )
    return path


@pytest.mark.parametrize("command", ["sweep", "tune"])
def test_sweep_and_tune_refuse_a_production_target(tmp_path: Path, command: str) -> None:
    """sweep and tune refuse a production target with exit 2, naming --allow-production."""
    config = _config(tmp_path, "http://127.0.0.1:8000")
    extra = ["--budget-p95", "50ms"] if command == "tune" else []
    result = subprocess.run(
        [TRITONWATCH, command, "--url", "http://127.0.0.1:8000/", "--model", "simple",
         "--config", str(config), *extra],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    text = " ".join(result.stdout.split())
    assert "target 'prod' is marked production: true" in text
    assert "--allow-production" in text


def test_the_explicit_flag_lets_a_sweep_run(tmp_path: Path) -> None:
    """--allow-production lets a sweep of a production target run to its knee."""
    with Simulator() as sim:
        config = _config(tmp_path, sim.http_url)
        result = subprocess.run(
            [TRITONWATCH, "sweep", "--url", sim.http_url, "--model", "simple", "--config", str(config),
             "--allow-production", "--concurrency", "1", "--measurement-interval", "300ms", "--max-windows", "3"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "knee: 1" in result.stdout


def test_a_non_production_url_is_not_refused(tmp_path: Path) -> None:
    """Only a production target's own host counts, its gRPC endpoint included."""
    config = parse_config(
        "targets: [{name: prod, url: 'http://127.0.0.2:8000', production: true, models: [{name: m}]}]\n",
        "c.yaml",
    )
    assert config.production_target_for("http://127.0.0.1:8000") is None
    target = config.production_target_for("grpc://127.0.0.2:8001")  # its gRPC endpoint counts
    assert target is not None
    assert target.name == "prod"


def test_scheduled_sweeps_skip_production_unless_allowed() -> None:
    """Scheduled sweeps skip production targets with a log line, unless allow_production."""
    text = (
        "sweep: {{enabled: true{allow}}}\n"
        "targets:\n"
        "  - {{name: prod, url: 'http://127.0.0.1:1', production: true, models: [{{name: m}}]}}\n"
        "  - {{name: lab, url: 'http://127.0.0.1:2', models: [{{name: m}}]}}\n"
    )
    with capture_logs() as logs:
        plans = sweep_plans(parse_config(text.format(allow=""), "c.yaml"))
    assert [plan.target for plan in plans] == ["lab"]
    assert [log["target"] for log in logs if log["event"] == "sweep_skipped_production"] == ["prod"]
    allowed = sweep_plans(parse_config(text.format(allow=", allow_production: true"), "c.yaml"))
    assert [plan.target for plan in allowed] == ["prod", "lab"]
