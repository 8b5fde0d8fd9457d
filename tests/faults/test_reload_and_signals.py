"""A broken config on SIGHUP, and SIGTERM in the middle of work.

* A reload with a broken file (bad YAML, a missing file, an invalid value) keeps the
  old config running: the target is still checked, scraped and probed, and the failure
  shows in ``tritonwatch_config_last_reload_successful`` and ``config_reload_failed``.
* SIGTERM during a scheduled sweep and during ``tritonwatch tune --apply``: the load
  stops (no connection left on the server, nothing pending in it), ``tune`` puts the
  last kept config back, and both exit on the signal rather than at the work's end:
  the sweep's thread joins (nothing abandoned), ``tune`` says it was interrupted.
  Their exit times have a 5x smoke bound only; the daemon's shutdown budget itself is
  checked exactly in tests/runtime/test_shutdown_budget.py.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from faults_support import (
    MetricsRecorder,
    connections_to,
    counter_total,
    established_on,
    metric,
    port_of,
)

from support import (
    TRITONWATCH,
    DaemonProcess,
    assert_within_smoke_bound,
    http_get,
    sample_value,
    wait_until,
)
from tritonwatch.commands.tune.repository import ModelRepository
from tritonwatch.sim.server import Simulator

pytestmark = pytest.mark.real

EXIT_EXPECTED_S = 1.0
"""What a stop on SIGTERM takes: the main thread wakes every 0.5 s, the load ends."""


def _target(sim: Simulator) -> str:
    return (
        f"targets: [{{name: sim, url: '{sim.http_url}', metrics_url: '{sim.metrics_url}',"
        " models: [{name: simple}]}]\n"
    )


def _canary_successes(daemon: DaemonProcess) -> float:
    return counter_total(
        daemon.metrics(), "tritonwatch_canary_requests_total", model="simple", outcome="success"
    )


def _pending_on_server(sim: Simulator) -> float | None:
    status, text = http_get(sim.metrics_url)
    assert status == 200
    return sample_value(text, "nv_inference_pending_request_count", [("model", "simple")])


def _quiet(sim: Simulator) -> bool:
    """No client connected to the server's HTTP port and nothing pending in it."""
    return established_on(port_of(sim.http_url)) == 0 and _pending_on_server(sim) == 0


def test_a_broken_reload_keeps_the_old_config_running(tmp_path: Path) -> None:
    """A broken reload leaves the old config probing and scraping; a good one then applies."""
    with Simulator() as sim:
        path = tmp_path / "tritonwatch.yaml"
        good = (
            "scrape: {interval: 500ms, timeout: 400ms}\n"
            "canary: {rate: 10/s}\n"
            "nvml: {enabled: false}\n" + _target(sim)
        )
        path.write_text(good)
        daemon = DaemonProcess(path)
        recorder = MetricsRecorder(daemon)
        try:
            wait_until(lambda: _canary_successes(daemon) >= 5, 15, "the canary running")
            broken = {
                "targets: [{name: sim, url: 'http://127.0.0.1:1'\n": "invalid YAML",
                None: "cannot read the file",
                good.replace("interval: 500ms", "interval: 0s"): "scrape.interval",
            }
            for text, message in broken.items():
                if text is None:
                    path.unlink()
                else:
                    path.write_text(text)
                mark = len(daemon.events)
                daemon.signal(signal.SIGHUP)
                failed = daemon.wait_for_event("config_reload_failed", after=mark)
                assert message in failed["error"]
                assert str(path) in failed["error"]
                assert metric(daemon, "tritonwatch_config_last_reload_successful") == 0
                # The old config keeps running: probed, scraped, checked.
                successes = _canary_successes(daemon)
                scrapes = recorder.values(
                    "tritonwatch_scrape_duration_seconds",
                    [("target", "sim"), ("source", "metrics")],
                )
                wait_until(
                    lambda s=successes: _canary_successes(daemon) >= s + 5, 10, "more canary"
                )
                wait_until(  # new scrapes, new durations
                    lambda s=scrapes: len(set(recorder.values(
                        "tritonwatch_scrape_duration_seconds",
                        [("target", "sim"), ("source", "metrics")],
                    ))) > len(set(s)),
                    10, "another scrape",
                )  # fmt: skip
                assert metric(daemon, "tritonwatch_up", target="sim") == 1
                assert metric(daemon, "tritonwatch_scrape_success", target="sim",
                              source="metrics") == 1  # fmt: skip

            path.write_text(good.replace("rate: 10/s", "rate: 20/s"))
            mark = len(daemon.events)
            daemon.signal(signal.SIGHUP)
            daemon.wait_for_event("config_reloaded", after=mark)
            assert metric(daemon, "tritonwatch_config_last_reload_successful") == 1
            assert daemon.wait_for_event("canary_started", after=mark)["rate"] == 20.0
        finally:
            recorder.stop()
            assert daemon.stop() == 0
    assert set(recorder.statuses) == {200}


def test_sigterm_during_a_sweep(tmp_path: Path) -> None:
    """SIGTERM mid-sweep ends the sweep and exits 0 in time, no thread abandoned."""
    with Simulator() as sim:
        path = tmp_path / "sweep.yaml"
        path.write_text(
            "sweep: {enabled: true, interval: 1s, concurrency: [4, 8], "
            "measurement_interval: 2s, max_windows: 10}\n"
            "nvml: {enabled: false}\n" + _target(sim)
        )
        daemon = DaemonProcess(path)
        try:
            daemon.wait_for_event("sweep_started", timeout=15)
            pid, port = daemon.process.pid, port_of(sim.http_url)
            wait_until(lambda: connections_to(pid, port) >= 4, 10, "the sweep's 4 clients")
        except BaseException:
            daemon.stop()
            raise
        started = time.monotonic()
        daemon.signal(signal.SIGTERM)
        try:
            code = daemon.process.wait(timeout=15)
        finally:
            elapsed = time.monotonic() - started
            daemon.stop()
        assert code == 0
        assert_within_smoke_bound(elapsed, EXIT_EXPECTED_S, "the daemon's exit mid-sweep")
        names = [event.get("event") for event in daemon.events]
        assert "stopped" in names
        assert "exit_abandons_threads" not in names  # the sweep ended, not abandoned
        assert "job_failed" not in names
        wait_until(lambda: _quiet(sim), 5, "no connection or request left on the server")


def test_sigterm_during_tune_restores_the_config(tmp_path: Path) -> None:
    """SIGTERM during `tune --apply` restores the model's original config and exits 130."""
    with Simulator(scenario="gpu-underused") as sim:
        repository = ModelRepository(sim.http_url, "simple")
        original = repository.config()
        process = subprocess.Popen(
            [TRITONWATCH, "tune", "--url", sim.http_url, "--model", "simple", "--budget-p95",
             "500ms", "--apply", "--concurrency", "1,4", "--measurement-interval", "300ms",
             "--metrics-url", sim.metrics_url],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            assert process.stdout is not None
            for line in process.stdout:
                if line.startswith("step 1:"):
                    break
            wait_until(
                lambda: repository.config()["instance_group"][0]["count"] == 2, 10, "step 1 on"
            )
            wait_until(
                lambda: connections_to(process.pid, port_of(sim.http_url)) >= 1, 10, "its load"
            )
            started = time.monotonic()
            process.send_signal(signal.SIGTERM)
            rest, _ = process.communicate(timeout=15)
            elapsed = time.monotonic() - started
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        restored = repository.config()
        repository.close()
        assert process.returncode == 130, rest
        assert_within_smoke_bound(elapsed, EXIT_EXPECTED_S, "tune's exit mid-step")
        assert "restored the last kept config" in rest
        assert "interrupted; the last kept config is in place" in " ".join(rest.split())
        assert restored == original
        wait_until(lambda: _quiet(sim), 5, "no connection or request left on the server")
