"""``tritonwatch simulate``: flags, environment defaults, and the process end to end."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tritonwatch.sim import cli
from tritonwatch.sim.testing import fetch

pytestmark = pytest.mark.real

START_TIMEOUT_S = 20.0


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="tritonwatch")
    cli.register(root.add_subparsers(dest="command"))
    return root


def test_defaults_are_tritons_ports_on_loopback() -> None:
    """Without flags: 127.0.0.1, ports 8000/8001/8002, healthy, built-in models."""
    args = parser().parse_args(["simulate"])
    assert (args.host, args.http_port, args.grpc_port, args.metrics_port) == (
        "127.0.0.1",
        8000,
        8001,
        8002,
    )
    assert (args.scenario, args.models, args.seed, args.summary_latencies) == (
        "healthy",
        None,
        0,
        False,
    )
    assert args.histogram_latencies is False
    assert args.handler is cli.run


def test_flags_and_environment_variables_set_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every flag reads TRITONWATCH_<FLAG> as its default; the command line wins."""
    monkeypatch.setenv("TRITONWATCH_HTTP_PORT", "9100")
    monkeypatch.setenv("TRITONWATCH_SUMMARY_LATENCIES", "true")
    monkeypatch.setenv("TRITONWATCH_SCENARIO", "compute-bound")
    monkeypatch.setenv("TRITONWATCH_HISTOGRAM_LATENCIES", "true")
    args = parser().parse_args(["simulate", "--grpc-port", "0", "--scenario", "network-bound"])
    assert (args.http_port, args.grpc_port, args.summary_latencies) == (9100, 0, True)
    assert args.scenario == "network-bound"
    assert args.histogram_latencies is True


@pytest.mark.parametrize("scenario", ["kv-cache-pressure", "ttft-queueing"])
def test_the_llm_scenarios_are_choices(scenario: str) -> None:
    """--scenario accepts the LLM scenarios (the choices come from SCENARIOS)."""
    assert parser().parse_args(["simulate", "--scenario", scenario]).scenario == scenario


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--scenario", "on-fire"],
        ["simulate", "--http-port", "70000"],
        ["simulate", "--seed", "x"],
    ],
)
def test_bad_flags_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Invalid scenario names, ports and numbers stop argparse with status 2."""
    with pytest.raises(SystemExit) as caught:
        parser().parse_args(argv)
    assert caught.value.code == 2
    assert "simulate" in capsys.readouterr().err


def test_cache_config_is_triton_s_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """--cache-config local,size=N gives the server a response cache; another cache or
    no size is a usage error (status 2) before anything starts."""
    assert parser().parse_args(["simulate"]).cache_config is None
    args = parser().parse_args(["simulate", "--cache-config", "local,size=2048"])
    assert args.cache_config == "local,size=2048"
    bad = parser().parse_args(["simulate", "--cache-config", "redis,host=x"])
    assert cli.run(bad) == 2
    assert "only the local cache is simulated" in capsys.readouterr().err


def _start(*flags: str) -> subprocess.Popen[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TRITONWATCH_")}
    return subprocess.Popen(
        [sys.executable, "-m", "tritonwatch.sim", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _first_line(process: subprocess.Popen[str], timeout_s: float = START_TIMEOUT_S) -> str:
    assert process.stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout_s)
    if not lines:
        process.kill()
        raise TimeoutError("the simulator printed no endpoints line")
    return lines[0]


def test_process_prints_ports_serves_and_stops_on_sigterm() -> None:
    """With port 0 it prints the bound ports, serves on them, and exits 0 on SIGTERM."""
    process = _start(
        "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--scenario", "memory-scarce"
    )
    try:
        fields = dict(part.split("=", 1) for part in _first_line(process).split())
        assert set(fields) == {"http", "grpc", "metrics"}
        assert all(
            value.startswith("127.0.0.1:") and not value.endswith(":0") for value in fields.values()
        )
        state = json.loads(fetch(f"http://{fields['http']}/sim/state"))
        assert {model["scenario"] for model in state["models"]} == {"memory-scarce"}
        assert "nv_gpu_memory_used_bytes" in fetch(f"http://{fields['metrics']}/metrics")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        process.stdout.close()  # type: ignore[union-attr]
        process.stderr.close()  # type: ignore[union-attr]


def test_process_reports_bad_model_set_and_busy_port(tmp_path: Path) -> None:
    """A bad --models file exits 2 naming the field; a taken port exits 1."""
    bad = tmp_path / "models.yaml"
    bad.write_text("gpus: []\nmodels: []\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "tritonwatch.sim", "--models", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert f"{bad}: gpus: Tuple should have at least 1 item" in result.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "tritonwatch.sim",
                "--http-port",
                port,
                "--grpc-port",
                "0",
                "--metrics-port",
                "0",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 1
    assert "cannot listen" in result.stderr
