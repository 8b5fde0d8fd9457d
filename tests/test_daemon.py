"""The daemon owner in-process: run states, health, reload bookkeeping, probe reuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from support import http_get, sample_value, wait_until
from tritonwatch.config import TargetConfig, load_config
from tritonwatch.daemon import Daemon, RunState
from tritonwatch.observations import Outcome, ReadinessObservation


class FakeProbe:
    """Counts checks and closes; answers ready for targets named ``up*``."""

    def __init__(self, target: TargetConfig, timeout: float) -> None:
        self.target = target.name
        self.timeout = timeout
        self.checks = 0
        self.closed = False

    def check(self) -> ReadinessObservation:
        self.checks += 1
        ready = self.target.startswith("up")
        outcome = Outcome.SUCCESS if ready else Outcome.CONNECTION_ERROR
        return ReadinessObservation(self.target, 0.0, outcome, ready, 0.001)

    def close(self) -> None:
        self.closed = True


class ProbeFactory:
    def __init__(self) -> None:
        self.made: list[FakeProbe] = []

    def __call__(self, target: TargetConfig, timeout: float) -> FakeProbe:
        probe = FakeProbe(target, timeout)
        self.made.append(probe)
        return probe


def _write(path: Path, *names: str, interval: str = "200ms") -> Path:
    targets = "".join(
        f"  - {{name: {name}, url: 'http://127.0.0.1:1', models: [{{name: m}}]}}\n"
        for name in names
    )
    path.write_text(f"scrape: {{interval: {interval}, timeout: 50ms}}\ntargets:\n{targets}")
    return path


@pytest.fixture
def factory() -> ProbeFactory:
    return ProbeFactory()


def _daemon(path: Path, factory: ProbeFactory) -> Daemon:
    return Daemon(path, load_config(path), listen_override="127.0.0.1:0", probe_factory=factory)


def test_health_follows_the_run_state(tmp_path: Path, factory: ProbeFactory) -> None:
    daemon = _daemon(_write(tmp_path / "c.yaml", "up-a", "down-b"), factory)
    assert daemon.state == RunState.STOPPED
    assert daemon.health().healthy is False
    assert daemon.health().details["reason"] == "daemon is stopped"
    daemon.start()
    try:
        assert daemon.state == RunState.STARTED
        assert daemon.health().healthy is True
        wait_until(lambda: all(p.checks >= 2 for p in factory.made), 5, "two rounds of checks")
        text = http_get(f"{daemon.exporter_url}/metrics")[1]
        assert sample_value(text, "tritonwatch_up", [("target", "up-a")]) == 1
        assert sample_value(text, "tritonwatch_up", [("target", "down-b")]) == 0
    finally:
        daemon.stop()
    assert daemon.state == RunState.STOPPED
    assert all(p.closed for p in factory.made)
    assert daemon.health().healthy is False


def test_jobs_that_stop_running_make_health_fail(tmp_path: Path, factory: ProbeFactory) -> None:
    """If the scheduler stalls, /health turns 503 and names the late job."""
    daemon = _daemon(_write(tmp_path / "c.yaml", "up-a", interval="100ms"), factory)
    daemon.start()
    try:
        wait_until(lambda: factory.made[0].checks >= 1, 5, "first check")
        daemon._scheduler.pause()  # simulate a wedged executor

        def late() -> list[str]:
            return [job["job"] for job in daemon.health().details.get("late_jobs", [])]

        # Both of the target's jobs (readiness and scrape) fall behind, one after the other.
        wait_until(lambda: late() == ["readiness:up-a", "scrape:up-a"], 5, "both jobs late")
        report = daemon.health()
        assert not report.healthy
        assert report.details["reason"] == "jobs did not run on schedule"
        status, _ = http_get(f"{daemon.exporter_url}/health")
        assert status == 503
        daemon._scheduler.resume()
        wait_until(lambda: daemon.health().healthy, 5, "recovery")
    finally:
        daemon.stop()


def test_reload_reuses_unchanged_probes_and_closes_removed_ones(
    tmp_path: Path, factory: ProbeFactory
) -> None:
    path = _write(tmp_path / "c.yaml", "up-a", "up-b")
    daemon = _daemon(path, factory)
    daemon.start()
    try:
        first_a, first_b = factory.made
        _write(path, "up-a", "up-c")
        assert daemon.reload() is True
        assert [p.target for p in factory.made] == ["up-a", "up-b", "up-c"]
        assert first_b.closed
        assert not first_a.closed
        path.write_text("targets: []\n")
        assert daemon.reload() is False
        assert [t.name for t in daemon.config.targets] == ["up-a", "up-c"]
    finally:
        daemon.stop()
