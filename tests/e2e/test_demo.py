"""`make demo`'s command and the top-level `simulate` command, as a user runs them."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from support import TRITONWATCH, http_get, sample_value, wait_until

pytestmark = pytest.mark.real


def test_demo_runs_its_models_against_the_simulator_and_stops_on_ctrl_c() -> None:
    """`demo` canaries its four scenario models on the simulator, streams from the LLM one
    (TTFT/ITL quantiles, tokens, its KV-cache gauge) and exits 0 on Ctrl-C."""
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
            "llm": "healthy",
        }

        def all_models_answered() -> bool:
            text = http_get(running["exporter"])[1]
            return all(
                (sample_value(text, "tritonwatch_canary_requests_total",
                              [("model", m), ("outcome", "success")]) or 0) >= 2
                for m in ("simple", "resnet50", "text_identity", "llm")
            )  # fmt: skip

        wait_until(all_models_answered, 20, "canary successes on all four demo models")

        def llm_shown() -> str | None:
            """The page once the LLM's streams and the server's vLLM page were read."""
            text = http_get(running["exporter"])[1]
            kv = sample_value(text, "tritonwatch_llm_kv_cache_usage_ratio", [("model", "llm")])
            return text if kv is not None else None

        text = wait_until(llm_shown, 20, "the demo LLM's KV-cache usage at the daemon")
        for measure in ("ttft", "itl"):
            median = sample_value(text, "tritonwatch_canary_stream_quantile_seconds",
                                  [("model", "llm"), ("measure", measure), ("quantile", "0.5")])  # fmt: skip
            # about 8 ms a simulated token: no first token or gap comes sooner
            assert median is not None and median >= 0.007, (measure, median)
        tokens = sample_value(text, "tritonwatch_canary_output_tokens_total", [("model", "llm")])
        first_tokens = [("model", "llm"), ("measure", "ttft"), ("window", "5m")]
        streams = sample_value(
            text, "tritonwatch_canary_stream_quantile_seconds_count", first_tokens
        )
        assert streams and tokens == 32 * streams, (streams, tokens)  # the config's max_tokens
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
