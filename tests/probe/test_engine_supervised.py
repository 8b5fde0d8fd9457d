"""The engine never goes silent: a crash of its loop is survived, and a moved name is
followed (issue 25, items 2 and 4). Loopback servers and a stand-in canary; each test
waits for what it expects, with generous limits, and asserts causes (which server
answered, what was counted and logged), never how long it took."""

from __future__ import annotations

import asyncio
import select
import socket
import threading
import time
from collections.abc import Callable

import pytest
import structlog
from answer_server_support import (
    ANSWER_JSON,
    answer_server,
    http_answer,
    http_plan,
    outcome_count,
    run_canary,
)
from engine_support import (
    OK,
    REQUEST,
    Behaviour,
    RawServer,
    Recorder,
    SteppedClock,
    answer_each,
    raw_server,
    read_request,
    until,
)

from tritonwatch.probe.canary import engine_channels, engine_sockets
from tritonwatch.probe.canary.breaker import BREAKER_PROBE_SECONDS
from tritonwatch.probe.canary.clients import client_for
from tritonwatch.probe.canary.engine import (
    RESTART_BACKOFF_MAX,
    RESTART_BACKOFF_MIN,
    SETTLE_SECONDS,
    CanaryEngine,
)
from tritonwatch.probe.canary.engine_channels import Address, EngineCrashedError
from tritonwatch.records.observations import Outcome
from tritonwatch.state.canary_board import CanaryBoard
from tritonwatch.wire.limits import HttpRequest

WAIT = 20.0
"""Real seconds each wait may take (what it waits for takes well under one)."""


async def _until(done: Callable[[], bool], what: str) -> None:
    await until(done, what, WAIT)


def _serving(
    engine: CanaryEngine,
    canary: Recorder,
    host: str,
    port: int,
    *,
    timeout: float = 2.0,
    max_in_flight: int = 1,
) -> asyncio.Task[None]:
    """The engine serving ``canary`` from now on, until the task is stopped."""
    serving = engine.serve(canary, host, port, HttpRequest(REQUEST), timeout=timeout,
                           max_in_flight=max_in_flight, first_send=time.monotonic())  # fmt: skip
    return asyncio.create_task(serving)


async def _stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def _successes(canary: Recorder) -> int:
    return sum(1 for _, answer in canary.answers if not isinstance(answer, BaseException))


class _CrashOnce(Recorder):
    """A canary whose schedule raises once, on its ``crash_at``-th gap: the engine's own
    loop fails mid-turn (where a bug of ours would)."""

    def __init__(self, gap: float, crash_at: int) -> None:
        super().__init__(gap=gap)
        self.gaps = 0
        self.crash_at = crash_at

    def next_gap(self) -> float:
        self.gaps += 1
        if self.gaps == self.crash_at:
            raise RuntimeError("injected: a bug in the engine's turn")
        return self.gap


def test_a_crash_of_the_engines_loop_is_counted_logged_and_survived() -> None:
    """Breaks if a crash stops the canaries (successes stop rising), goes uncounted, is
    logged without its traceback, or leaves /health's "recovering" unset."""
    engine = CanaryEngine()
    canary = _CrashOnce(gap=0.01, crash_at=5)

    async def main() -> None:
        task = _serving(engine, canary, "127.0.0.1", server.port)
        await _until(lambda: engine.restarts == 1, "the crash")
        after_crash = _successes(canary)
        await _until(lambda: _successes(canary) >= after_crash + 10, "successes after the crash")
        await _stopped(task)

    with raw_server(answer_each(OK)) as server, structlog.testing.capture_logs() as logs:
        try:
            asyncio.run(main())
            assert engine.recovering()  # within its settling time
        finally:
            engine.stop()
    crashes = [e for e in logs if e["event"] == "canary_engine_crashed"]
    assert len(crashes) == 1
    assert crashes[0]["restarts"] == 1
    assert crashes[0].get("exc_info") is True  # the traceback goes with it
    assert engine.restarts == 1


def test_requests_in_flight_at_a_crash_fail_as_ours_and_a_lost_schedule_is_restored() -> None:
    """Breaks if a request caught in a crash is lost (neither answered nor failed), is
    billed to the server, or the canary whose gap raised never sends again."""
    engine = CanaryEngine()
    canary = _CrashOnce(gap=0.05, crash_at=3)

    async def main() -> None:
        task = _serving(engine, canary, "127.0.0.1", server.port, timeout=5.0, max_in_flight=8)
        await _until(lambda: engine.restarts == 1 and _successes(canary) >= 5, "recovery")
        canary.allow = False  # no more sends: every request sent must now end
        await _until(lambda: len(canary.answers) == len(canary.asked), "every request's end")
        await _stopped(task)

    # The server answers slowly, so the crash (at a send) finds a request in flight.
    with raw_server(answer_each(OK, delay=0.2)) as server:
        try:
            asyncio.run(main())
        finally:
            engine.stop()
    failures = [a for _, a in canary.answers if isinstance(a, BaseException)]
    assert failures and all(isinstance(f, EngineCrashedError) for f in failures)
    assert len(canary.answers) == len(canary.asked)  # none lost


def test_a_models_request_caught_in_a_crash_is_a_client_error_not_the_servers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Breaks if a real model canary counts a request the engine's crash ended (the
    fault is ours) as anything but ``client_error``: as the server's ``bad_response``
    it would leave the availability SLO. The crash comes while the server holds an
    answer, so a request is surely in flight."""
    holding, release, crash = threading.Event(), threading.Event(), threading.Event()
    answer = http_answer(ANSWER_JSON)

    def infer(conn: socket.socket, _request: bytes) -> bool:
        if server.infers == 3:  # the third: held in flight until after the crash
            holding.set()
            release.wait(WAIT)
        conn.sendall(answer)
        return True

    expire = CanaryEngine._expire

    crashed: list[int] = []

    def crashing_expire(self: CanaryEngine, now: float) -> None:
        if crash.is_set() and not crashed:  # once
            crashed.append(1)
            raise RuntimeError("injected: a bug in the engine's turn")
        expire(self, now)

    monkeypatch.setattr(CanaryEngine, "_expire", crashing_expire)

    def until(stats: CanaryBoard, engine: CanaryEngine) -> bool:
        if holding.is_set() and not engine.restarts:
            crash.set()  # the engine's next turn crashes
        if engine.restarts:
            release.set()
        return engine.restarts == 1 and outcome_count(stats, Outcome.SUCCESS) >= 5

    with answer_server(infer) as server:
        try:
            client = client_for("http", server.url, "")
            run = run_canary(http_plan(server, timeout=WAIT), client, until)
        finally:
            release.set()
    outcomes = run.outcomes()
    assert outcomes[Outcome.CLIENT_ERROR] == 1  # the held request, ended by the crash
    assert outcomes.get(Outcome.BAD_RESPONSE, 0) == 0
    assert outcomes.get(Outcome.CONNECTION_ERROR, 0) == 0


class _Names:
    """A resolver the test moves: ``host`` resolves to ``addresses``, as a DNS record or
    a pod's name would after a reschedule; counts the lookups."""

    def __init__(self, *ports: int) -> None:
        self.addresses: list[Address] = [_address(port) for port in ports]
        self.lookups = 0

    async def __call__(self, host: str, port: int) -> list[Address]:
        assert host == "triton.example"  # resolved here, never by the system
        self.lookups += 1
        return list(self.addresses)


def _address(port: int) -> Address:
    return (socket.AF_INET, ("127.0.0.1", port))


def _free_refusing_port() -> tuple[socket.socket, int]:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    return holder, holder.getsockname()[1]


def test_a_moved_name_is_followed_after_the_first_refused_connect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Breaks if the engine keeps knocking on the old address (its first lookup's) after
    the name moved and the old server died, or moves without a log line. The periodic
    lookup is pushed out of the test: only the refused connect's lookup can find the
    new address."""
    monkeypatch.setattr(engine_channels, "RESOLVE_EVERY", 3600.0)
    monkeypatch.setattr(engine_channels, "RESOLVE_MIN_GAP", 0.0)
    canary = Recorder(gap=0.02)
    tail: list[tuple[float, object]] = []
    with raw_server(_answer_then_close(3)) as first, raw_server(answer_each(OK)) as second:
        names = _Names(first.port)
        engine = CanaryEngine(resolve=names)

        async def main() -> None:
            task = _serving(engine, canary, "triton.example", 8000)
            await _until(lambda: len(first.requests) >= 3, "the first server's answers")
            names.addresses = [_address(second.port)]  # the name moves...
            first.close()  # ...and the first server dies (its connections close after 3)
            # Every request either server took is answered OK: once that many successes
            # are recorded (a server counts a request before its answer reaches the
            # engine), the second server's five answers are in the canary's record.
            await _until(
                lambda: (
                    len(second.requests) >= 5
                    and _successes(canary) == len(first.requests) + len(second.requests)
                ),
                "the second server's answers, recorded",
            )
            tail.extend(canary.answers[-5:])
            await _stopped(task)

        with structlog.testing.capture_logs() as logs:
            try:
                asyncio.run(main())
            finally:
                engine.stop()
    changed = [e for e in logs if e["event"] == "canary_address_changed"]
    assert changed and changed[0]["old"] == [f"127.0.0.1:{first.port}"]
    assert changed[0]["new"] == [f"127.0.0.1:{second.port}"]
    assert names.lookups >= 2  # looked up again, not only at the start
    # Once the second server answered, nothing more went to the first.
    assert len(tail) == 5
    assert all(not isinstance(a, BaseException) for _, a in tail)


def test_a_name_that_moves_while_the_old_server_lives_is_followed_at_the_next_period(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Breaks if a keep-alive connection to the old address is reused forever after the
    name moved (the old server still answering: a blue/green switch)."""
    monkeypatch.setattr(engine_channels, "RESOLVE_EVERY", 0.1)
    monkeypatch.setattr(engine_channels, "RESOLVE_MIN_GAP", 0.0)
    canary = Recorder(gap=0.02)
    with raw_server(answer_each(OK)) as first, raw_server(answer_each(OK)) as second:
        names = _Names(first.port)
        engine = CanaryEngine(resolve=names)

        async def main() -> None:
            task = _serving(engine, canary, "triton.example", 8000)
            await _until(lambda: len(first.requests) >= 3, "the first server's answers")
            names.addresses = [_address(second.port)]
            await _until(lambda: len(second.requests) >= 3, "the second server's answers")
            moved = len(first.requests)
            await _until(lambda: len(second.requests) >= 8, "more of the second's answers")
            assert len(first.requests) == moved  # the old connection was let go
            await _stopped(task)

        try:
            asyncio.run(main())
        finally:
            engine.stop()
    assert first.connections == 1 and second.connections == 1


def test_refused_connects_look_the_name_up_no_more_often_than_the_minimum_gap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Breaks if each refused connect of a dead server (twenty a second) is a lookup of
    its own: within ``RESOLVE_MIN_GAP`` of the last lookup, none is made."""
    monkeypatch.setattr(engine_channels, "RESOLVE_EVERY", 3600.0)
    monkeypatch.setattr(engine_channels, "RESOLVE_MIN_GAP", 3600.0)
    holder, dead = _free_refusing_port()
    canary = Recorder(gap=0.01)
    names = _Names(dead)
    engine = CanaryEngine(resolve=names)

    async def main() -> None:
        task = _serving(engine, canary, "triton.example", 8000)
        await _until(lambda: _refused(canary) >= 20, "twenty refused connects")
        # Each refusal asked for a lookup before it was recorded: let the loop take
        # every one of those asks (nothing else runs on it) before counting.
        for _ in range(100):
            await asyncio.sleep(0)
        await _stopped(task)

    with holder:
        try:
            asyncio.run(main())
        finally:
            engine.stop()
    assert names.lookups == 1  # serve's own; the next waits out the gap


def _held_after(count: int, holding: threading.Event, release: threading.Event) -> Behaviour:
    """Keep-alive: answers the first ``count`` requests at once, then holds each answer
    (``holding`` set) until ``release``: an old server slower than the send gap, with a
    request in flight when the name moves."""

    def behaviour(conn: socket.socket, server: RawServer) -> None:
        buffer = bytearray()
        while (request := read_request(conn, buffer)) is not None:
            server.requests.append(request)
            if len(server.requests) > count:
                holding.set()
                release.wait(WAIT)
            conn.sendall(OK)

    return behaviour


def test_a_connection_to_the_old_address_is_not_kept_after_its_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Breaks if the connection of a request in flight when the name moved goes back to
    the idle pool when its answer comes: the old server (still answering, a blue/green
    switch) would get every later request on it."""
    monkeypatch.setattr(engine_channels, "RESOLVE_EVERY", 0.05)
    monkeypatch.setattr(engine_channels, "RESOLVE_MIN_GAP", 0.0)
    holding, release = threading.Event(), threading.Event()
    canary = Recorder(gap=0.05)
    first_server = raw_server(_held_after(3, holding, release))
    with first_server as first, raw_server(answer_each(OK)) as second:
        names = _Names(first.port)
        engine = CanaryEngine(resolve=names)

        async def main() -> None:
            task = _serving(engine, canary, "triton.example", 8000, timeout=WAIT * 2)
            await _until(holding.is_set, "a request held in flight by the first server")
            lookups = names.lookups
            names.addresses = [_address(second.port)]  # the name moves meanwhile
            # A lookup after the move hands the engine the new address (moved(), in the
            # same step as the count); two turns later the engine has taken it.
            await _until(lambda: names.lookups > lookups, "a lookup after the move")
            turns = engine.turns
            await _until(lambda: engine.turns >= turns + 2, "the engine taking the move")
            assert len(canary.answers) == 3  # the held one still in flight
            release.set()
            await _until(lambda: len(second.requests) >= 3, "the second server's answers")
            await _stopped(task)

        try:
            asyncio.run(main())
        finally:
            release.set()
            engine.stop()
    assert len(first.requests) == 4 and first.connections == 1  # nothing after the held one


def _answer_then_close(count: int) -> Callable[[socket.socket, RawServer], None]:
    """Answers ``count`` requests on each connection, then closes it (a server dying)."""

    def behaviour(conn: socket.socket, server: RawServer) -> None:
        buffer = bytearray()
        for _ in range(count):
            request = read_request(conn, buffer)
            if request is None:
                return
            server.requests.append(request)
            conn.sendall(OK)

    return behaviour


def test_every_address_of_a_name_is_tried() -> None:
    """Breaks if the engine sticks to a name's first address when it refuses, though the
    name has another that serves."""
    holder, dead = _free_refusing_port()
    canary = Recorder(gap=0.02)
    with holder, raw_server(answer_each(OK)) as live:
        engine = CanaryEngine(resolve=_Names(dead, live.port))

        async def main() -> None:
            task = _serving(engine, canary, "triton.example", 8000)
            await _until(lambda: _successes(canary) >= 3, "answers from the live address")
            await _stopped(task)

        try:
            asyncio.run(main())
        finally:
            engine.stop()
    refused = [a for _, a in canary.answers if isinstance(a, BaseException)]
    assert len(refused) == 1 and isinstance(refused[0], ConnectionRefusedError)  # one try


def test_a_moved_name_is_followed_within_fifteen_seconds_by_design() -> None:
    """Breaks if the lookup period and gap could leave a moved name unfollowed for more
    than the 15 s promised: a periodic lookup, or a connect failure's lookup after the
    gap, then one probe while the breaker holds the load back."""
    assert engine_channels.RESOLVE_EVERY + 1.0 <= 15.0  # a live old server: next period, one send
    assert engine_channels.RESOLVE_MIN_GAP + BREAKER_PROBE_SECONDS <= 15.0  # a dead one


def test_a_server_restarted_on_the_same_port_is_served_again() -> None:
    """Breaks if a canary stays on a connection the dead server left, or stops trying
    after the refused connects of the restart gap (a Triton restart on its ports)."""
    canary = Recorder(gap=0.02)
    first = RawServer(_answer_then_close(3))
    port = first.port
    engine = CanaryEngine()

    async def main() -> None:
        task = _serving(engine, canary, "127.0.0.1", port)
        await _until(lambda: len(first.requests) >= 3, "answers before the restart")
        first.close()
        await _until(lambda: _refused(canary) >= 2, "refused connects while it is down")
        again = _RawServerOn(port, answer_each(OK))  # the same port, as a restart binds it
        try:
            await _until(lambda: len(again.requests) >= 5, "answers after the restart")
        finally:
            again.close()
        await _stopped(task)

    try:
        asyncio.run(main())
    finally:
        engine.stop()
    assert not isinstance(canary.answers[-1][1], BaseException)


def _refused(canary: Recorder) -> int:
    return sum(1 for _, a in canary.answers if isinstance(a, ConnectionRefusedError))


class _RawServerOn(RawServer):
    """A :class:`RawServer` on a given port (the one a dead server left)."""

    def __init__(self, port: int, behaviour: Callable[[socket.socket, RawServer], None]) -> None:
        self._wanted = port
        super().__init__(behaviour)

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", self._wanted), reuse_port=False)
        self.port = self._wanted
        self._local = threading.local()
        threading.Thread(target=self._accept, daemon=True).start()


# -- the restart back-off, on a clock the engine's own waits move ------------------------


class _CrashOn(Recorder):
    """A canary that never sends (``allow`` off: no socket, only the schedule) and whose
    schedule raises on each gap numbered in ``crash_on``: one engine crash each."""

    def __init__(self, gap: float, crash_on: set[int]) -> None:
        super().__init__(gap=gap, allow=False)
        self.gaps = 0
        self.crash_on = crash_on

    def next_gap(self) -> float:
        self.gaps += 1
        if self.gaps in self.crash_on:
            raise RuntimeError("injected: a bug in the engine's turn")
        return self.gap


def _restart_waits(monkeypatch: pytest.MonkeyPatch, canary: _CrashOn) -> list[float]:
    """Runs the engine for ``canary`` on a clock that only its own waits move (each wait
    jumps the clock by its whole timeout and returns at once: a back-off of 5 s costs
    no real time), until every crash in ``crash_on`` happened; returns the waits the
    engine announced before each restart (``restart_in_seconds``), in order."""
    clock = SteppedClock()
    engine = CanaryEngine(clock=clock)
    crashes = len(canary.crash_on)

    def wait_ready(
        readers: list[socket.socket],
        writers: list[socket.socket],
        timeout: float,
        fits: bool | None = None,
    ) -> tuple[list[socket.socket], list[socket.socket]]:
        if engine.restarts >= crashes:  # done: idle in real time until stopped
            return select.select(readers, writers, [], min(timeout, 0.01))[:2]
        clock.now += timeout
        return select.select(readers, writers, [], 0.0)[:2]

    monkeypatch.setattr(engine_sockets, "wait_ready", wait_ready)
    with structlog.testing.capture_logs() as logs:

        def waits() -> list[float]:
            crashed = [e for e in logs if e["event"] == "canary_engine_crashed"]
            return [float(e["restart_in_seconds"]) for e in crashed]

        async def main() -> None:
            request = HttpRequest(REQUEST)
            serving = engine.serve(
                canary, "127.0.0.1", 9, request, timeout=2.0, max_in_flight=1, first_send=clock.now
            )
            task = asyncio.create_task(serving)
            await _until(lambda: len(waits()) >= crashes, f"{crashes} crashes")
            await _stopped(task)

        try:
            asyncio.run(main())
        finally:
            engine.stop()
    return waits()


def test_the_restart_back_off_doubles_up_to_its_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Breaks if the wait before the engine's loop runs again grows without bound: after
    ten crashes in a row the canaries would go silent for over 100 s."""
    canary = _CrashOn(gap=1.0, crash_on=set(range(1, 13)))
    waits = _restart_waits(monkeypatch, canary)
    assert waits == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2] + [RESTART_BACKOFF_MAX] * 6)
    assert RESTART_BACKOFF_MAX == 5.0


def test_the_restart_back_off_starts_again_once_the_engine_settled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Breaks if the back-off never returns to its first step after the engine ran
    ``SETTLE_SECONDS`` without a crash (a crash a day would wait 5 s each time)."""
    settled = int(SETTLE_SECONDS) + 10  # gaps of 1 s with no crash between the 5th and the last
    canary = _CrashOn(gap=1.0, crash_on={1, 2, 3, 4, 5, 5 + settled})
    waits = _restart_waits(monkeypatch, canary)
    assert waits == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, RESTART_BACKOFF_MIN])
