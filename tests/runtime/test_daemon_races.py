"""The daemon's reload races (issue "One request path, no races"), each with a thread
held at the racy point by events, against a loopback stand-in for Triton's repository
API (index_server_support.py) — no sleeps, no timing assertions.

* R1: a discovery job reads the config, does I/O without the lock, and must never put
  the config it read back in force over a reload that landed meanwhile.
* R4: a reload whose apply times out keeps the running config, says so, and returns
  False instead of raising into the main thread.
* R6: a reload never closes a readiness probe that a job is still inside ``check()`` of.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from index_server_support import IndexServer
from structlog.testing import capture_logs

from support import http_get, sample_value, wait_until
from tritonwatch.config import TargetConfig, load_config
from tritonwatch.probe import runner as canary_runner
from tritonwatch.records.observations import Outcome, ReadinessObservation
from tritonwatch.runtime import daemon as daemon_module
from tritonwatch.runtime.daemon import Daemon

WAIT = 30.0
"""Real seconds a wait may take (what it waits for takes well under a second)."""
HELD_JOB = "held-job"
"""The thread a test runs a job on, to hold it at the racy point."""


@pytest.fixture
def server() -> Iterator[IndexServer]:
    with IndexServer(["a1", "b1"]) as running:
        yield running


def _target(server: IndexServer, models: str, name: str = "t") -> str:
    return (
        f"  - name: {name}\n"
        f"    url: '{server.url}'\n"
        f"    metrics_url: '{server.url}/metrics'\n"
        f"    models: {models}\n"
    )


def _write(path: Path, targets: str, scrape: str = "1h", files: str = "") -> Path:
    """A config whose periodic jobs (scrape 1 h, discovery 1 h) stay out of the way:
    the tests run the job under test themselves, on a thread they hold."""
    path.write_text(
        f"scrape: {{interval: {scrape}, timeout: 20s}}\n"
        "nvml: {enabled: false}\n"
        "canary: {rate: 1}\n"
        f"discovery: {{model_refresh_interval: 1h, refresh_interval: 1h, files: [{files}]}}\n"
        f"targets:\n{targets}"
    )
    return path


def _daemon(path: Path, **kwargs: Any) -> Daemon:
    return Daemon(path, load_config(path), listen_override="127.0.0.1:0", **kwargs)


@pytest.fixture
def started() -> Iterator[Callable[[Daemon], Daemon]]:
    """Starts a daemon and stops it after the test, whatever happened."""
    daemons: list[Daemon] = []

    def start(daemon: Daemon) -> Daemon:
        daemons.append(daemon)
        daemon.start()
        return daemon

    yield start
    for daemon in daemons:
        daemon.stop()


def _canaries(daemon: Daemon) -> set[tuple[str, str]]:
    """The (target, model) of every canary series the daemon declares (and exports)."""
    return {(s.target, s.model) for s in daemon.canary_board.snapshot(time.monotonic())}


def _interval(daemon: Daemon, job_id: str) -> timedelta:
    return daemon._scheduler.get_job(job_id).trigger.interval  # type: ignore[no-any-return]


def _run_held(work: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=work, name=HELD_JOB, daemon=True)
    thread.start()
    return thread


def test_r1_a_reload_during_a_slow_index_read_is_never_undone(
    tmp_path: Path, server: IndexServer, started: Callable[[Daemon], Daemon]
) -> None:
    """R1. The model-discovery job reads the config, then the repository index (slow:
    held here), and a SIGHUP lands meanwhile with another model selection and scrape
    interval. Breaks if the read, once answered, puts the selection it was made under
    back in force (the old selection's canaries sending again, the old jobs), or if it
    puts its stale models into the new config instead of reading the index again."""
    path = _write(tmp_path / "c.yaml", _target(server, "{include: '^a'}"))
    daemon = started(_daemon(path))
    wait_until(lambda: _canaries(daemon) == {("t", "a1")}, WAIT, "the first read's canary")
    server.models = ["a1", "a2", "b1", "b2"]  # the index changes between reads
    arrived = server.hold_next_index()
    with capture_logs() as logs:
        job = _run_held(daemon._refresh_models)  # the scheduled job, on a thread of ours
        assert arrived.wait(WAIT), "the job never read the index"
        _write(path, _target(server, "{include: '^b'}"), scrape="2h")
        assert daemon.reload() is True
        server.release()
        job.join(WAIT)
    assert not job.is_alive()
    assert _canaries(daemon) == {("t", "b1"), ("t", "b2")}  # the reload's, read again
    assert _interval(daemon, "scrape:t") == timedelta(hours=2)  # the reload's job
    assert [e["event"] for e in logs if e["event"] == "model_discovery_read_dropped"] == [
        "model_discovery_read_dropped"
    ]


def test_r1_a_reload_during_a_discovery_file_look_is_never_undone(
    tmp_path: Path,
    server: IndexServer,
    started: Callable[[Daemon], Daemon],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R1, file discovery. The discovery job reads the config and looks at its files
    (held there); a reload meanwhile moves discovery to other files. Breaks if the job
    then applies the config it read, bringing the old files' targets back."""
    address = server.url.removeprefix("http://")
    for name, model in (("one", "a1"), ("two", "b1")):
        labels = {"name": name, "models": model, "metrics_url": f"{server.url}/metrics"}
        group = [{"targets": [address], "labels": labels}]
        (tmp_path / f"{name}.json").write_text(json.dumps(group))
    static = _target(server, "[{name: a2}]", name="static")
    path = _write(tmp_path / "c.yaml", static, files="one.json")
    daemon = started(_daemon(path))
    assert _canaries(daemon) == {("static", "a2"), ("one", "a1")}
    job_thread: list[threading.Thread] = []
    arrived, release = threading.Event(), threading.Event()
    real_file_stamps = daemon_module.file_stamps

    def held_file_stamps(paths: Iterable[Path]) -> Any:
        stamps = real_file_stamps(paths)
        if threading.current_thread() in job_thread:
            arrived.set()
            release.wait(WAIT)
        return stamps

    monkeypatch.setattr(daemon_module, "file_stamps", held_file_stamps)
    job_thread.append(threading.Thread(target=daemon._rediscover, daemon=True))
    job_thread[0].start()
    assert arrived.wait(WAIT), "the job never looked at the files"
    _write(path, static, files="two.json")
    assert daemon.reload() is True
    release.set()
    job_thread[0].join(WAIT)
    assert not job_thread[0].is_alive()
    assert _canaries(daemon) == {("static", "a2"), ("two", "b1")}


def test_r4_a_reload_whose_apply_times_out_keeps_the_running_config(
    tmp_path: Path,
    server: IndexServer,
    started: Callable[[Daemon], Daemon],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R4. The canaries' loop is wedged (held here) when a reload comes: the canaries'
    apply times out. Breaks if the time-out raises out of ``reload()`` (into the main
    thread), if the new config stays half in force, or if the failure goes unsaid
    (``tritonwatch_config_last_reload_successful`` 0, ``config_apply_failed``); and if
    the same reload, once the loop is free again, does not put the new config in force
    (the runner's order of reconciles: tests/probe/test_canary_runner_turns.py)."""
    path = _write(tmp_path / "c.yaml", _target(server, "[{name: a1}]"))
    daemon = started(_daemon(path))
    wait_until(lambda: _canaries(daemon) == {("t", "a1")}, WAIT, "the first canary")
    wedged, unwedge = threading.Event(), threading.Event()

    def wedge() -> None:
        wedged.set()
        unwedge.wait(WAIT)

    monkeypatch.setattr(canary_runner, "APPLY_TIMEOUT_SECONDS", 0.05, raising=False)
    daemon._canaries._loop.call_soon_threadsafe(wedge)
    assert wedged.wait(WAIT)
    _write(path, _target(server, "[{name: b1}]"), scrape="2h")
    try:
        with capture_logs() as logs:
            assert daemon.reload() is False
    finally:
        unwedge.set()
    events = [e["event"] for e in logs if e["log_level"] == "error"]
    assert events == ["config_apply_failed", "config_restore_incomplete"]
    assert [m.name for m in daemon.config.targets[0].models] == ["a1"]
    assert _interval(daemon, "scrape:t") == timedelta(hours=1)  # the running config's
    metrics = http_get(f"{daemon.exporter_url}/metrics")[1]
    assert sample_value(metrics, "tritonwatch_config_last_reload_successful") == 0

    monkeypatch.setattr(canary_runner, "APPLY_TIMEOUT_SECONDS", WAIT)
    assert daemon.reload() is True  # the file is unchanged: b1, once the loop is free
    assert _canaries(daemon) == {("t", "b1")}
    assert [canary.plan.model for canary in daemon._canaries.running().values()] == ["b1"]
    metrics = http_get(f"{daemon.exporter_url}/metrics")[1]
    assert sample_value(metrics, "tritonwatch_config_last_reload_successful") == 1


class HeldProbe:
    """A readiness probe whose ``check()`` can be held (the test's job thread's only: a
    scheduled check passes); it notes a close under any check."""

    def __init__(self, target: TargetConfig) -> None:
        self.target = target.name
        self.held = False
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.checking = 0
        self.closed = False
        self.closed_under_a_check = False

    def check(self) -> ReadinessObservation:
        self.checking += 1
        try:
            if self.held and threading.current_thread().name == HELD_JOB:
                self.arrived.set()
                self.release.wait(WAIT)
            now = time.monotonic()
            return ReadinessObservation(self.target, now, Outcome.SUCCESS, True, 0.0, "")
        finally:
            self.checking -= 1

    def close(self) -> None:
        self.closed_under_a_check |= self.checking > 0
        self.closed = True


def test_r6_a_replaced_probe_is_closed_only_once_its_check_ended(
    tmp_path: Path, server: IndexServer, started: Callable[[Daemon], Daemon]
) -> None:
    """R6. A readiness job is inside ``check()`` (held here) when a reload replaces the
    target's probe. Breaks if the reload closes the probe under the check (its socket
    shut mid-read), or if the probe is never closed once the check ended."""
    made: list[HeldProbe] = []

    def factory(target: TargetConfig, timeout: float) -> HeldProbe:
        made.append(HeldProbe(target))
        return made[-1]

    path = _write(tmp_path / "c.yaml", _target(server, "[{name: a1}]"))
    daemon = started(_daemon(path, probe_factory=factory))
    first = made[0]
    first.held = True
    job = _run_held(lambda: daemon._check_readiness("t"))
    assert first.arrived.wait(WAIT)
    path.write_text(path.read_text().replace("timeout: 20s", "timeout: 10s"))  # a new probe
    assert daemon.reload() is True
    assert len(made) == 2
    assert not first.closed  # its check is still running
    first.release.set()
    job.join(WAIT)
    assert not job.is_alive()
    wait_until(lambda: first.closed, WAIT, "the replaced probe closed by its last check")
    assert not first.closed_under_a_check
    assert not made[1].closed


def test_a_reload_keeps_the_timers_of_jobs_it_did_not_change(
    tmp_path: Path, server: IndexServer, started: Callable[[Daemon], Daemon]
) -> None:
    """Jobs are reconciled against the plan. Breaks if a reload that changes only the
    scrape interval removes and re-adds every job (each one's next run moved), or leaves
    the scrape jobs on their old interval."""
    path = _write(tmp_path / "c.yaml", _target(server, "[{name: a1}]"))
    daemon = started(_daemon(path))
    before = {job.id: job.next_run_time for job in daemon._scheduler.get_jobs()}
    _write(path, _target(server, "[{name: a1}]"), scrape="2h")
    assert daemon.reload() is True
    after = {job.id: job.next_run_time for job in daemon._scheduler.get_jobs()}
    assert after.keys() == before.keys()
    unchanged = {"evaluate", "slo_save"}
    assert {job_id for job_id in after if after[job_id] == before[job_id]} == unchanged
    assert _interval(daemon, "scrape:t") == timedelta(hours=2)


def test_readiness_while_the_first_apply_runs_names_the_start_not_half_the_config(
    tmp_path: Path, server: IndexServer, started: Callable[[Daemon], Daemon]
) -> None:
    """The start's first apply is held after the scrapers are in place and before the
    canaries are declared; ``/-/ready`` is asked meanwhile (the exporter already
    listens). Breaks if readiness then lists the scrape it waits for and not the canary
    (a half-applied config read as the whole: in CI the canary's reason was missing),
    or if, once the start ended, it does not wait for the canary's first answer."""
    path = _write(tmp_path / "c.yaml", _target(server, "[{name: a1}]"))
    daemon = _daemon(path)
    arrived, release = threading.Event(), threading.Event()
    real_set_buckets = daemon.stream_board.set_buckets

    def held_set_buckets(**buckets: Any) -> None:
        if threading.current_thread().name == HELD_JOB:
            arrived.set()
            release.wait(WAIT)
        real_set_buckets(**buckets)

    daemon.stream_board.set_buckets = held_set_buckets  # type: ignore[method-assign]
    starting = _run_held(lambda: started(daemon))
    try:
        assert arrived.wait(WAIT), "the start never reached its first apply"
        assert daemon.readiness().waiting == ("the daemon to start (it is starting)",)
    finally:
        release.set()
    starting.join(WAIT)
    assert not starting.is_alive()
    assert "the first canary answer of t/a1 (http)" in daemon.readiness().waiting
