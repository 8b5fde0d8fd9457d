"""The daemon owner in-process: run states, health, reload bookkeeping, probe reuse, and
``tritonwatch_up`` as the daemon's real readiness probes derive it from real servers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sim_process import SimProcess
from support import http_get, sample_value, wait_until
from tritonwatch.config import TargetConfig, load_config
from tritonwatch.probe.interfaces import ReadinessProbe
from tritonwatch.probe.readiness import readiness_probe_for
from tritonwatch.records.observations import ReadinessObservation
from tritonwatch.runtime.daemon import Daemon, RunState

pytestmark = pytest.mark.sim


class CountedProbe:
    """The daemon's own probe for a target, with its checks and its close counted.

    Readiness is whatever the wrapped real probe answers; this only watches it.
    """

    def __init__(self, target: TargetConfig, probe: ReadinessProbe) -> None:
        self.target = target.name
        self._probe = probe
        self.checks = 0
        self.closed = False

    def check(self) -> ReadinessObservation:
        observation = self._probe.check()
        self.checks += 1
        return observation

    def close(self) -> None:
        self.closed = True
        self._probe.close()


class ProbeFactory:
    """The daemon's default factory (``readiness_probe_for``), remembering what it made."""

    def __init__(self) -> None:
        self.made: list[CountedProbe] = []

    def __call__(self, target: TargetConfig, timeout: float) -> CountedProbe:
        probe = CountedProbe(target, readiness_probe_for(target, timeout))
        self.made.append(probe)
        return probe


def _write(
    path: Path, targets: dict[str, str], interval: str = "200ms", timeout: str = "150ms"
) -> Path:
    """A config watching the simulator's ``simple`` model on each of ``targets`` (name → URL)."""
    lines = "".join(
        f"  - {{name: {name}, url: '{url}', models: [{{name: simple}}]}}\n"
        for name, url in targets.items()
    )
    path.write_text(f"scrape: {{interval: {interval}, timeout: {timeout}}}\ntargets:\n{lines}")
    return path


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    """One simulator (its own process, so the daemon's threads do not slow it) per module."""
    with SimProcess() as server:
        yield server


@pytest.fixture
def factory() -> ProbeFactory:
    return ProbeFactory()


def _daemon(path: Path, factory: ProbeFactory) -> Daemon:
    return Daemon(path, load_config(path), listen_override="127.0.0.1:0", probe_factory=factory)


def _up(daemon: Daemon) -> dict[str, float | None]:
    """``tritonwatch_up`` per configured target, read off the daemon's own /metrics."""
    text = http_get(f"{daemon.exporter_url}/metrics")[1]
    return {
        target.name: sample_value(text, "tritonwatch_up", [("target", target.name)])
        for target in daemon.config.targets
    }


def _wait_for_up(daemon: Daemon, expected: dict[str, float]) -> None:
    """Waits for ``tritonwatch_up`` to read ``expected``; a first check that is slow on a
    loaded host may read 0 once, a wrong derivation never reaches it."""
    seen: list[dict[str, float | None]] = []

    def reads_expected() -> bool:
        seen.append(_up(daemon))
        return seen[-1] == expected

    try:
        wait_until(reads_expected, 15, f"tritonwatch_up to read {expected}", every=0.2)
    except AssertionError as error:
        raise AssertionError(f"{error}; last read {seen[-1]}") from None


def test_up_is_what_the_real_probes_derive(
    tmp_path: Path, sim: SimProcess, closed_url: str, factory: ProbeFactory
) -> None:
    """Breaks if tritonwatch_up stops reading serving Triton (HTTP, gRPC) as 1, a refused port 0."""
    refused_port = closed_url.rsplit(":", 1)[1]
    targets = {
        "serving-http": sim.http_url,
        "serving-grpc": f"grpc://{sim.grpc_url}",
        "refused-http": closed_url,
        "refused-grpc": f"grpc://127.0.0.1:{refused_port}",
    }
    expected = {"serving-http": 1, "serving-grpc": 1, "refused-http": 0, "refused-grpc": 0}
    path = _write(tmp_path / "c.yaml", targets, interval="1s", timeout="800ms")
    daemon = _daemon(path, factory)
    daemon.start()
    try:
        _wait_for_up(daemon, expected)
    finally:
        daemon.stop()


def test_up_turns_to_zero_when_the_server_dies(tmp_path: Path, factory: ProbeFactory) -> None:
    """Breaks if ``tritonwatch_up`` keeps the last good reading of a server that is gone."""
    with SimProcess() as doomed:
        daemon = _daemon(_write(tmp_path / "c.yaml", {"t": doomed.http_url}), factory)
        daemon.start()
        try:
            _wait_for_up(daemon, {"t": 1})
            doomed.kill()
            _wait_for_up(daemon, {"t": 0})
        finally:
            daemon.stop()


def test_health_follows_the_run_state(
    tmp_path: Path, sim: SimProcess, factory: ProbeFactory
) -> None:
    """Breaks if /health reports healthy while stopped, or probes are left open on stop."""
    daemon = _daemon(_write(tmp_path / "c.yaml", {"a": sim.http_url, "b": sim.http_url}), factory)
    assert daemon.state == RunState.STOPPED
    assert daemon.health().healthy is False
    assert daemon.health().details["reason"] == "daemon is stopped"
    daemon.start()
    try:
        assert daemon.state == RunState.STARTED
        assert daemon.health().healthy is True
        wait_until(lambda: all(p.checks >= 2 for p in factory.made), 5, "two rounds of checks")
    finally:
        daemon.stop()
    assert daemon.state == RunState.STOPPED
    assert [p.target for p in factory.made] == ["a", "b"]
    assert all(p.closed for p in factory.made)
    assert daemon.health().healthy is False


def test_jobs_that_stop_running_make_health_fail(
    tmp_path: Path, sim: SimProcess, factory: ProbeFactory
) -> None:
    """Breaks if a stalled scheduler leaves /health at 200 or does not name the late jobs."""
    daemon = _daemon(
        _write(tmp_path / "c.yaml", {"a": sim.http_url}, interval="100ms", timeout="50ms"), factory
    )
    daemon.start()
    try:
        wait_until(lambda: factory.made[0].checks >= 1, 5, "first check")
        daemon._scheduler.pause()  # simulate a wedged executor

        def late() -> list[str]:
            return [job["job"] for job in daemon.health().details.get("late_jobs", [])]

        # Both of the target's jobs (readiness and scrape) fall behind, one after the other.
        wait_until(lambda: late() == ["readiness:a", "scrape:a"], 5, "both jobs late")
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
    tmp_path: Path, sim: SimProcess, factory: ProbeFactory
) -> None:
    """Breaks if a reload rebuilds an unchanged probe, leaks a removed one, or takes a bad file."""
    path = _write(tmp_path / "c.yaml", {"a": sim.http_url, "b": sim.http_url})
    daemon = _daemon(path, factory)
    daemon.start()
    try:
        first_a, first_b = factory.made
        _write(path, {"a": sim.http_url, "c": sim.http_url})
        assert daemon.reload() is True
        assert [p.target for p in factory.made] == ["a", "b", "c"]
        assert first_b.closed
        assert not first_a.closed
        path.write_text("targets: []\n")
        assert daemon.reload() is False
        assert [t.name for t in daemon.config.targets] == ["a", "c"]
    finally:
        daemon.stop()
