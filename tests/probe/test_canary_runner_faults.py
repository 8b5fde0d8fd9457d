"""The daemon's canaries (runner, ModelCanary, engine) through the faults that once
blinded or fooled the watcher (issue 25, test scale): a crash of the engine's loop, a
wedged engine, a server restarted on its ports, a sweep's pause. The in-process
simulator answers; each test causes the fault and waits for the state that must follow,
never asserting how long it took."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from support import wait_until
from tritonwatch.export.health import health_report
from tritonwatch.probe.canary import breaker
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.model_canary import ModelCanary
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.runner import CanaryRunner
from tritonwatch.sim.server import Simulator
from tritonwatch.state.canary_board import CanaryBoard, SeriesKey, latency_buckets

pytestmark = pytest.mark.sim

WAIT = 20.0
"""Real seconds a wait may take (what it waits for takes about a second at most)."""
RATE = 20.0
TIMEOUT = 0.5


def _plan(http_url: str, grpc_url: str, protocol: str = "http") -> CanaryPlan:
    return CanaryPlan(
        "sim", "simple", "", protocol, http_url, f"grpc://{grpc_url}", RATE, False, TIMEOUT,
        4, "random",
    )  # fmt: skip


def _key(protocol: str = "http") -> SeriesKey:
    return ("sim", "simple", protocol)


def _outcomes(runner: CanaryRunner, protocol: str = "http") -> dict[str, int]:
    for snap in runner.board.snapshot(time.monotonic()):
        if (snap.target, snap.model, snap.protocol) == _key(protocol):
            return snap.outcomes
    raise AssertionError(f"no series for {_key(protocol)}")


def _successes(runner: CanaryRunner, protocol: str = "http") -> int:
    return _outcomes(runner, protocol)["success"]


def _stalled_now(runner: CanaryRunner) -> bool:
    return runner.stalled(time.monotonic()).get(_key(), False)


@pytest.fixture
def runner() -> Iterator[CanaryRunner]:
    runner = CanaryRunner(CanaryBoard(latency_buckets([0.05])))
    yield runner
    runner.stop()


def _patch_turn(
    monkeypatch: pytest.MonkeyPatch, before: Callable[[], None]
) -> Callable[[CanaryEngine, object], None]:
    """Runs ``before`` at the start of every engine turn (where a bug of ours would
    raise, or a wedge would hold the thread)."""
    original = CanaryEngine._turn

    def turn(self: CanaryEngine, waker: object) -> None:
        before()
        original(self, waker)  # type: ignore[arg-type]

    monkeypatch.setattr(CanaryEngine, "_turn", turn)
    return turn


def test_an_engine_crash_is_survived_counted_and_shown_on_health(
    runner: CanaryRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Breaks if a crash of the engine's loop stops the success counters, goes uncounted,
    bills its in-flight requests to the server, or leaves /health saying "healthy"."""
    crash = threading.Event()

    def maybe_crash() -> None:
        if crash.is_set():
            crash.clear()
            raise RuntimeError("injected: a bug in the engine's turn")

    _patch_turn(monkeypatch, maybe_crash)
    with Simulator() as sim:
        runner.start([_plan(sim.http_url, sim.grpc_url)])
        wait_until(lambda: _successes(runner) >= 5, WAIT, "successes before the crash")
        crash.set()
        wait_until(lambda: runner.engine_restarts == 1, WAIT, "the crash")
        after = _successes(runner)
        wait_until(lambda: _successes(runner) >= after + 10, WAIT, "successes after it")
        outcomes = _outcomes(runner)
        report = health_report(
            "started", started=True, late=[], jobs=1,
            engine_restarts=runner.engine_restarts,
            engine_recovering=runner.engine_recovering(),
        )  # fmt: skip
        assert not _stalled_now(runner)
    assert runner.engine_restarts == 1
    # A request the crash caught is ours (client_error), never the server's.
    assert outcomes["connection_error"] == outcomes["timeout"] == outcomes["bad_response"] == 0
    assert report.healthy and report.details["status"] == "degraded"
    assert report.details["canary_engine_restarts"] == 1


def test_a_wedged_engine_stalls_its_canary_and_it_recovers(
    runner: CanaryRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Breaks if a canary that produces nothing (its engine thread held) is not called
    stalled, or stays stalled once outcomes come again."""
    running = threading.Event()
    running.set()
    _patch_turn(monkeypatch, lambda: running.wait(WAIT))
    with Simulator() as sim:
        runner.start([_plan(sim.http_url, sim.grpc_url)])
        wait_until(lambda: _successes(runner) >= 5, WAIT, "successes")
        assert not _stalled_now(runner)
        running.clear()  # the engine's thread stops at its next turn
        try:
            wait_until(lambda: _stalled_now(runner), WAIT, "the stalled verdict")
            stalled = [key for key, is_stalled in runner.stalled(time.monotonic()).items()
                       if is_stalled]  # fmt: skip
            report = health_report("started", started=True, late=[], jobs=1, stalled=stalled)
        finally:
            running.set()
        before = _successes(runner)
        wait_until(lambda: _successes(runner) > before, WAIT, "outcomes again")
        wait_until(lambda: not _stalled_now(runner), WAIT, "the stall to clear")
    assert stalled == [_key()]
    assert not report.healthy and report.details["stalled_canaries"][0]["model"] == "simple"


def test_a_canary_resumed_after_a_pause_owes_outcomes_from_the_resume(
    runner: CanaryRunner,
) -> None:
    """Breaks if the silence of a sweep's pause reads as a stall the moment it ends."""
    with Simulator() as sim:
        runner.start([_plan(sim.http_url, sim.grpc_url)])
        wait_until(lambda: _successes(runner) >= 3, WAIT, "successes")
        runner.set_paused("sim", "simple", True)
        (canary,) = runner.running().values()
        time.sleep(4 * canary.silence_allowed())  # silent far longer than allowed
        assert not _stalled_now(runner)  # paused: not judged
        runner.set_paused("sim", "simple", False)
        resumed = time.monotonic()
        assert runner.stalled(resumed)[_key()] is False
        # Judged again after the resume: a long silence from then on is a stall.
        assert runner.stalled(resumed + 100.0)[_key()] is True


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_server_restarted_on_its_ports_is_watched_again_and_the_breaker_closes(
    runner: CanaryRunner, monkeypatch: pytest.MonkeyPatch, protocol: str
) -> None:
    """Breaks if the canary stays on a dead connection or address after a restart on the
    same ports, its breaker never closes, or it keeps failing once the server is back."""
    monkeypatch.setattr(breaker, "BREAKER_PROBE_SECONDS", 0.2)
    http_port, grpc_port = _free_port(), _free_port()
    key = _key(protocol)
    first = Simulator(http_port=http_port, grpc_port=grpc_port).start()
    try:
        runner.start([_plan(first.http_url, first.grpc_url, protocol)])
        wait_until(lambda: _successes(runner, protocol) >= 5, WAIT, "successes before")
    finally:
        first.stop()  # a SIGKILL's effect on the canary: refused connects from now on
    wait_until(lambda: key in runner.board.open_circuits(), WAIT, "the breaker to open")
    failed = sum(n for outcome, n in _outcomes(runner, protocol).items() if outcome != "success")
    before = _successes(runner, protocol)
    with Simulator(http_port=http_port, grpc_port=grpc_port):
        wait_until(lambda: key not in runner.board.open_circuits(), WAIT, "the breaker to close")
        wait_until(lambda: _successes(runner, protocol) >= before + 10, WAIT, "successes after")
        (canary,) = runner.running().values()
        assert not canary.breaker_open
        # Outcomes come from the engine, the schedule intact: no canary left the engine.
        assert isinstance(canary, ModelCanary) and canary.sending_since is not None
    assert failed >= breaker.BREAKER_FAILURES
    assert not runner.stalled(time.monotonic())[key]


def test_a_poisson_schedule_is_allowed_its_long_gaps() -> None:
    """Breaks if a Poisson canary's random long gaps (one in twenty over three mean
    intervals) read as stalls: with many models /health would read degraded most of
    the time."""
    plan = _plan("http://127.0.0.1:9", "127.0.0.1:9")
    engine = CanaryEngine()  # never served: no thread, no socket
    constant = ModelCanary(plan, object(), CanaryBoard(), engine=engine)  # type: ignore[arg-type]
    poisson = ModelCanary(
        replace(plan, poisson=True),
        object(),  # type: ignore[arg-type]
        CanaryBoard(),
        engine=engine,
    )
    assert constant.silence_allowed() == pytest.approx(3 / RATE + TIMEOUT)
    assert poisson.silence_allowed() == pytest.approx(15 / RATE + TIMEOUT)
