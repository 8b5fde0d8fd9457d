"""`make demo`'s command and the top-level `simulate` command, as a user runs them."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from support import TRITONWATCH, http_get, sample_value, wait_until

pytestmark = pytest.mark.e2e


def test_demo_runs_three_models_against_the_simulator_and_stops_on_ctrl_c() -> None:
    """`demo` canaries its three scenario models on the simulator and exits 0 on Ctrl-C."""
    process = subprocess.Popen(
        [TRITONWATCH, "demo", "--listen", "127.0.0.1:0", "--log-format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        running = None
        deadline = time.monotonic() + 30
        while running is None and time.monotonic() < deadline:
            line = process.stdout.readline()
            if line.startswith("{") and json.loads(line).get("event") == "demo_running":
                running = json.loads(line)
        assert running is not None
        assert running["scenarios"] == {
            "simple": "healthy",
            "resnet50": "queue-delay-too-high",
            "text_identity": "gpu-underused",
        }

        def all_models_answered() -> bool:
            text = http_get(running["exporter"])[1]
            return all(
                (sample_value(text, "tritonwatch_canary_requests_total",
                              [("model", m), ("outcome", "success")]) or 0) >= 2
                for m in ("simple", "resnet50", "text_identity")
            )  # fmt: skip

        wait_until(all_models_answered, 20, "canary successes on all three demo models")
        assert http_get(running["health"])[0] == 200
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def test_simulate_is_a_tritonwatch_command() -> None:
    """`simulate` prints its three endpoints, serves readiness and exits 0 on SIGTERM."""
    process = subprocess.Popen(
        [TRITONWATCH, "simulate", "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline().split()
        endpoints = dict(part.split("=", 1) for part in banner)
        assert set(endpoints) == {"http", "grpc", "metrics"}
        assert http_get(f"http://{endpoints['http']}/v2/health/ready")[0] == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close() if process.stdout else None
