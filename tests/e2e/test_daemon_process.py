"""The real ``tritonwatch run`` process: metrics, health, reloads and signals, end to end."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from support import (
    SMOKE_FACTOR,
    TRITONWATCH,
    DaemonProcess,
    ReadyEndpoint,
    assert_within_smoke_bound,
    http_get,
    sample_value,
    wait_until,
)
from tritonwatch import __version__
from tritonwatch.runtime.process import SHUTDOWN_BUDGET_SECONDS

pytestmark = pytest.mark.real


def _config(*targets: tuple[str, str], interval: str = "300ms") -> str:
    lines = [f"scrape: {{interval: {interval}, timeout: 200ms}}", "targets:"]
    lines += [
        f"  - {{name: {name}, url: '{url}', models: [{{name: simple}}]}}" for name, url in targets
    ]
    return "\n".join(lines) + "\n"


def _up(text: str, target: str) -> float | None:
    return sample_value(text, "tritonwatch_up", [("target", target)])


def _metrics_when(daemon: DaemonProcess, condition: Callable[[str], bool], what: str) -> str:
    """The first /metrics text for which ``condition`` holds (10 s at most)."""

    def check() -> str | None:
        text = daemon.metrics()
        return text if condition(text) else None

    result: str = wait_until(check, timeout=10, what=what)
    return result


@pytest.fixture
def daemon_config(tmp_path: Path, ready_endpoint: ReadyEndpoint, closed_url: str) -> Path:
    path = tmp_path / "tritonwatch.yaml"
    path.write_text(_config(("ready", ready_endpoint.url), ("down", closed_url)))
    return path


def test_metrics_health_and_promtool(daemon_config: Path) -> None:
    """Readiness becomes tritonwatch_up per target; the exposition passes promtool."""
    launched = time.time()
    daemon = DaemonProcess(daemon_config)
    try:
        text = _metrics_when(
            daemon, lambda t: _up(t, "ready") == 1 and _up(t, "down") == 0, "both targets' up"
        )
        checked_at = time.time()
        assert sample_value(text, "tritonwatch_build_info", [("version", __version__)]) == 1
        assert sample_value(text, "tritonwatch_config_last_reload_successful") == 1
        started = sample_value(text, "tritonwatch_config_last_reload_success_timestamp_seconds")
        assert started is not None
        assert launched <= started <= checked_at  # the start-up load, in this run
        checked = subprocess.run(
            ["promtool", "check", "metrics"], input=text, capture_output=True, text=True
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        status, body = http_get(f"{daemon.url}/health")
        assert status == 200
        assert json.loads(body) == {"jobs": 2, "status": "healthy"}
        down = daemon.wait_for_event("target_not_ready", target="down")
        assert down["outcome"] == "connection_error"
    finally:
        assert daemon.stop() == 0


def test_sighup_swaps_a_good_config_and_keeps_the_old_one_on_a_bad_one(
    daemon_config: Path, ready_endpoint: ReadyEndpoint
) -> None:
    """SIGHUP swaps in a good config; a bad one is logged as check-config says, the old kept."""
    daemon = DaemonProcess(daemon_config)
    try:
        wait_until(lambda: _up(daemon.metrics(), "down") == 0, 10, "first readiness round")
        before = sample_value(
            daemon.metrics(), "tritonwatch_config_last_reload_success_timestamp_seconds"
        )

        # A good file: "down" goes, "renamed" comes.
        daemon_config.write_text(
            _config(("ready", ready_endpoint.url), ("renamed", ready_endpoint.url))
        )
        time.sleep(0.01)  # a visibly later reload timestamp
        mark = len(daemon.events)
        daemon.signal(signal.SIGHUP)
        daemon.wait_for_event("config_reloaded", after=mark)
        text = _metrics_when(daemon, lambda t: _up(t, "renamed") == 1, "the new target's up")
        assert _up(text, "down") is None
        assert sample_value(text, "tritonwatch_config_last_reload_successful") == 1
        after = sample_value(text, "tritonwatch_config_last_reload_success_timestamp_seconds")
        assert before is not None
        assert after is not None
        assert after > before

        # A bad file: same message as check-config, gauge 0, the good config keeps running.
        daemon_config.write_text(_config(("ready", ready_endpoint.url)) + "scrape_typo: 1\n")
        expected = subprocess.run(
            [TRITONWATCH, "check-config", str(daemon_config)], capture_output=True, text=True
        )
        assert expected.returncode == 2
        mark = len(daemon.events)
        daemon.signal(signal.SIGHUP)
        failed = daemon.wait_for_event("config_reload_failed", after=mark)
        assert failed["error"] + "\n" == expected.stderr
        assert failed["level"] == "error"
        text = daemon.metrics()
        assert sample_value(text, "tritonwatch_config_last_reload_successful") == 0
        assert sample_value(
            text, "tritonwatch_config_last_reload_success_timestamp_seconds"
        ) == pytest.approx(after)
        assert _up(text, "renamed") == 1  # still watched under the old config
        assert http_get(f"{daemon.url}/health")[0] == 200
    finally:
        assert daemon.stop() == 0


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_exits_zero_with_a_probe_stuck_on_a_hanging_server(
    tmp_path: Path, hanging_endpoint: str, number: signal.Signals
) -> None:
    """Even with a probe stuck on a hanging server, the process ends in time and says so.

    Its readiness probe holds a worker thread inside a 4 s timeout, which the exit waits
    for at most SHUTDOWN_BUDGET_SECONDS (tests/runtime/test_shutdown_budget.py checks that wait
    exactly); here the time has a 5x smoke bound on that budget."""
    config = tmp_path / "hang.yaml"
    config.write_text(
        "scrape: {interval: 5s, timeout: 4s}\n"
        f"targets: [{{name: hung, url: '{hanging_endpoint}', models: [{{name: m}}]}}]\n"
    )
    daemon = DaemonProcess(config)
    daemon.wait_for_event("started")
    time.sleep(1.0)  # the probe is now stuck inside its 4 s timeout
    started = time.monotonic()
    daemon.signal(number)
    try:
        daemon.process.wait(timeout=SMOKE_FACTOR * SHUTDOWN_BUDGET_SECONDS + 10)
    finally:
        elapsed = time.monotonic() - started
        code = daemon.stop()
    assert code == 0
    assert_within_smoke_bound(elapsed, SHUTDOWN_BUDGET_SECONDS, "the exit on a stop signal")
    daemon.wait_for_event("stopped", timeout=2)
    assert all("component" in event for event in daemon.events)


def test_canary_series_from_the_simulator_pass_promtool(tmp_path: Path) -> None:
    """The daemon's canary against the simulator: every series with its labels, the SLO
    threshold as an exact bucket, promtool-clean exposition (at full detail: every
    family the daemon has)."""
    from tritonwatch.sim.server import Simulator

    with Simulator() as sim:
        config = tmp_path / "sim.yaml"
        config.write_text(
            "exporter: {detail: full}\n"
            "scrape: {interval: 1s, timeout: 500ms}\n"
            "canary: {rate: 10/s}\n"
            "targets:\n"
            f"  - name: sim\n    url: '{sim.http_url}'\n    grpc_url: 'grpc://{sim.grpc_url}'\n"
            "    models:\n"
            "      - {name: simple, slo: {latency: {threshold: 35ms}}}\n"
            "      - {name: resnet50, canary: {protocol: grpc}}\n"
        )
        daemon = DaemonProcess(config)
        try:

            def both_succeeded(text: str) -> bool:
                return all(
                    (sample_value(text, "tritonwatch_canary_requests_total",
                                  [("model", m), ("outcome", "success")]) or 0) >= 5
                    for m in ("simple", "resnet50")
                )  # fmt: skip

            text = _metrics_when(daemon, both_succeeded, "canary successes for both models")
        finally:
            assert daemon.stop() == 0
    labels = [("target", "sim"), ("model", "simple"), ("protocol", "http")]
    assert (
        sample_value(text, "tritonwatch_canary_latency_seconds_bucket", [*labels, ("le", "0.035")])
        is not None
    )
    assert (
        sample_value(text, "tritonwatch_canary_latency_seconds_bucket", [*labels, ("le", "0.05")])
        is not None
    )
    assert (sample_value(text, "tritonwatch_canary_latency_seconds_count", labels) or 0) >= 5
    grpc_labels = [("model", "resnet50"), ("protocol", "grpc"), ("outcome", "timeout")]
    assert sample_value(text, "tritonwatch_canary_requests_total", grpc_labels) == 0
    for window in ("1m", "5m"):
        for quantile in ("0.5", "0.9", "0.95", "0.99"):
            value = sample_value(
                text,
                "tritonwatch_latency_quantile_seconds",
                [
                    ("model", "simple"),
                    ("quantile", quantile),
                    ("window", window),
                    ("source", "canary"),
                ],
            )
            assert value is not None
            assert 0 < value < 1
    checked = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_scheduled_sweep_exports_its_curve(tmp_path: Path) -> None:
    """An enabled sweep runs on schedule with the canary paused and exports tritonwatch_sweep_*."""
    from tritonwatch.sim.server import Simulator

    with Simulator() as sim:
        config = tmp_path / "sweep.yaml"
        config.write_text(
            "sweep: {enabled: true, interval: 1s, concurrency: [1, 2], measurement_interval: 300ms,"
            " max_windows: 3}\n"
            f"targets: [{{name: sim, url: '{sim.http_url}', models: [{{name: simple}}]}}]\n"
        )
        daemon = DaemonProcess(config)
        try:
            started = daemon.wait_for_event("sweep_started", timeout=15)
            finished = daemon.wait_for_event("sweep_finished", timeout=30)
            text = daemon.metrics()
        finally:
            assert daemon.stop() == 0
    assert started["levels"] == [1.0, 2.0]
    assert finished["knee"] in (1.0, 2.0)
    labels = [("target", "sim"), ("model", "simple")]
    for level in ("1", "2"):
        value = sample_value(
            text,
            "tritonwatch_sweep_throughput_inferences_per_second",
            [*labels, ("concurrency", level)],
        )
        assert value is not None
        assert value > 50
        p95 = sample_value(
            text,
            "tritonwatch_sweep_latency_seconds",
            [*labels, ("concurrency", level), ("quantile", "0.95")],
        )
        assert p95 is not None
        assert 0 < p95 < 0.05
    assert sample_value(text, "tritonwatch_sweep_knee_concurrency", labels) == finished["knee"]
    assert sample_value(text, "tritonwatch_sweep_operating_point_concurrency", labels) is not None
    checked = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
