"""What the daemon itself says when its canaries go blind (issue 25): an engine crash
counted on /metrics and shown on /health (200, degraded: it already recovered), a
wedged engine's stalled canary on both (503 naming it), cleared once outcomes come."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from support import http_get, sample_value, wait_until
from tritonwatch.config import load_config
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.runtime.daemon import Daemon
from tritonwatch.sim.server import Simulator

pytestmark = pytest.mark.sim

WAIT = 20.0
"""Real seconds a wait may take (what it waits for takes about a second at most)."""
SERIES = [("target", "sim"), ("model", "simple"), ("protocol", "http")]


def _daemon(tmp_path: Path, url: str) -> Daemon:
    path = tmp_path / "c.yaml"
    path.write_text(
        "scrape: {interval: 1s, timeout: 800ms}\n"
        "canary: {rate: 20, timeout: 500ms}\n"
        f"targets:\n  - {{name: sim, url: '{url}', models: [{{name: simple}}]}}\n"
    )
    return Daemon(path, load_config(path), listen_override="127.0.0.1:0")


def _metric(daemon: Daemon, name: str, labels: list[tuple[str, str]] | None = None) -> float:
    value = sample_value(http_get(f"{daemon.exporter_url}/metrics")[1], name, labels or [])
    return -1.0 if value is None else value


def _successes(daemon: Daemon) -> float:
    labels = [*SERIES, ("outcome", "success")]
    return _metric(daemon, "tritonwatch_canary_requests_total", labels)


def _health(daemon: Daemon) -> tuple[int, dict[str, object]]:
    status, body = http_get(f"{daemon.exporter_url}/health")
    return status, json.loads(body)


def _before_each_turn(monkeypatch: pytest.MonkeyPatch, before: Callable[[], None]) -> None:
    original = CanaryEngine._turn

    def turn(self: CanaryEngine, waker: object) -> None:
        before()
        original(self, waker)  # type: ignore[arg-type]

    monkeypatch.setattr(CanaryEngine, "_turn", turn)


def test_an_engine_crash_is_counted_on_metrics_and_degrades_health(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Breaks if the daemon hides a crash of its canary engine (no counter, /health
    "healthy"), answers 503 for one it recovered from, or its successes stop rising."""
    crash = threading.Event()

    def maybe_crash() -> None:
        if crash.is_set():
            crash.clear()
            raise RuntimeError("injected: a bug in the engine's turn")

    _before_each_turn(monkeypatch, maybe_crash)
    with Simulator() as sim:
        daemon = _daemon(tmp_path, sim.http_url)
        daemon.start()
        try:
            wait_until(lambda: _successes(daemon) >= 5, WAIT, "successes before the crash")
            assert _health(daemon)[1]["status"] == "healthy"
            crash.set()
            wait_until(
                lambda: _metric(daemon, "tritonwatch_canary_engine_restarts_total") == 1.0,
                WAIT, "the restart counted",
            )  # fmt: skip
            after = _successes(daemon)
            wait_until(lambda: _successes(daemon) >= after + 10, WAIT, "successes after it")
            status, body = _health(daemon)
            stalled = _metric(daemon, "tritonwatch_canary_stalled", SERIES)
        finally:
            daemon.stop()
    assert status == 200
    assert body["status"] == "degraded" and body["canary_engine_restarts"] == 1
    assert stalled == 0.0


def test_a_stalled_canary_is_on_metrics_and_health_until_it_produces_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Breaks if a canary that produces nothing leaves the gauge at 0 and /health green,
    or stays flagged after its outcomes came back."""
    running = threading.Event()
    running.set()
    _before_each_turn(monkeypatch, lambda: running.wait(WAIT))
    with Simulator() as sim:
        daemon = _daemon(tmp_path, sim.http_url)
        daemon.start()
        try:
            wait_until(lambda: _successes(daemon) >= 5, WAIT, "successes")
            running.clear()  # the engine's thread holds at its next turn
            try:
                wait_until(
                    lambda: _metric(daemon, "tritonwatch_canary_stalled", SERIES) == 1.0,
                    WAIT, "the stalled gauge",
                )  # fmt: skip
                status, body = _health(daemon)
            finally:
                running.set()
            wait_until(
                lambda: _metric(daemon, "tritonwatch_canary_stalled", SERIES) == 0.0,
                WAIT, "the gauge to clear",
            )  # fmt: skip
            wait_until(lambda: _health(daemon)[0] == 200, WAIT, "/health to recover")
        finally:
            daemon.stop()
    assert status == 503 and body["status"] == "degraded"
    assert body["stalled_canaries"] == [{"target": "sim", "model": "simple", "protocol": "http"}]
