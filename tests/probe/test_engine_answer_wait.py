"""Answers left in the kernel until the engine collects them (``ANSWER_WAIT``).

The kernel stamps each answer's arrival, so the engine need not wake the moment it
comes: a model that sends again only later has its answer read at the next send's
wake-up (or ``ANSWER_WAIT`` after its own send), with others. These tests hold the
engine to what that may and may not change: the latency (from the stamp, not the
read), the outcome (an answer that came in time is no timeout), and where it must not
wait (no stamps; a model that sends again sooner).

The engine runs on virtual time (:class:`engine_support.VirtualTime`): the server
answers a set number of virtual seconds after each request and every wait of the
engine's is simulated, so send times, read times and wake-ups are exact.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest
from engine_support import OK, REQUEST, Recorder, VirtualTime, raw_server

from tritonwatch.probe.canary import engine as engine_module
from tritonwatch.probe.canary.engine import ANSWER_WAIT, CanaryEngine
from tritonwatch.probe.canary.engine_wires import RawAnswer
from tritonwatch.wire.limits import HttpRequest

FIRST = 1000.0625
"""The first canary's first send, on the virtual clock (which starts at 1000)."""


@dataclass
class TimedRecorder(Recorder):
    """A :class:`Recorder` that also notes when (virtual time) each answer was handed over."""

    clock: VirtualTime | None = None
    delivered: list[float] = field(default_factory=list)

    def record(self, intended: float, answer: RawAnswer | BaseException, woke: float) -> None:
        assert self.clock is not None
        self.delivered.append(self.clock.now)
        super().record(intended, answer, woke)


def _run(
    monkeypatch: pytest.MonkeyPatch, clock: VirtualTime, delay: float,
    canaries: list[TimedRecorder], seconds: float, *, timeout: float = 2.0,
    stagger: float = 0.0,
) -> tuple[CanaryEngine, int]:  # fmt: skip
    """Serves every canary on one engine on virtual time, the server answering each
    request ``delay`` after it came: sends for ``seconds`` from :data:`FIRST` (the k-th
    canary's first ``k * stagger`` later), then room for every answer; returns the
    stopped engine and the server's connection count."""
    engine = CanaryEngine(clock=clock)
    clock.install(engine, monkeypatch)
    for canary in canaries:
        canary.clock = clock

    def stop_sending() -> None:
        for canary in canaries:
            canary.allow = False

    clock.at(FIRST + seconds, stop_sending)
    clock.until = FIRST + seconds + 2 * timeout + 1.0

    async def main(port: int) -> None:
        tasks = [
            asyncio.create_task(
                engine.serve(
                    canary,
                    "127.0.0.1",
                    port,
                    HttpRequest(REQUEST),
                    timeout=timeout,
                    max_in_flight=4,
                    first_send=FIRST + k * stagger,
                )
            )
            for k, canary in enumerate(canaries)
        ]
        for _ in range(3000):  # every canary on the engine before virtual time moves
            if len(engine._channels) == len(canaries):
                break
            await asyncio.sleep(0.005)
        clock.started = True
        assert await asyncio.to_thread(clock.reached.wait, 60), "virtual time never ran out"
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    with raw_server(clock.answer_each(OK, delay)) as server:
        try:
            asyncio.run(main(server.port))
        finally:
            engine.stop()
        return engine, server.connections


def _latencies(canary: Recorder) -> list[float]:
    return [a[3] - w for (_, a), w in zip(canary.answers, canary.woke, strict=True)
            if not isinstance(a, BaseException)]  # fmt: skip


def test_an_answer_read_later_keeps_the_time_it_arrived(monkeypatch: pytest.MonkeyPatch) -> None:
    """Breaks if an answer left in the kernel is timed to its read (latency would grow
    by the wait), or if the engine still wakes for each answer (no wait at all)."""
    clock, canary = VirtualTime(), TimedRecorder(gap=1.0)
    _run(monkeypatch, clock, 0.01, [canary], 2.5)
    assert canary.asked == pytest.approx([FIRST, FIRST + 1, FIRST + 2], abs=1e-9)
    assert canary.woke == canary.asked
    assert all(not isinstance(a, BaseException) and a[0] == 200 for _, a in canary.answers)
    # Handed over only when collected: ANSWER_WAIT after the send, its own wake-up…
    assert canary.delivered == pytest.approx([w + ANSWER_WAIT for w in canary.woke], abs=1e-9)
    # …yet timed from the kernel's stamp: the server's 10 ms, not the wait.
    assert _latencies(canary) == pytest.approx([0.01] * 3, abs=1e-9)


def test_the_answers_of_several_models_cost_one_wake_up_per_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Breaks if each answer still wakes the thread on its own (two turns per request),
    or if answers collected together get lost or mixed up."""
    clock = VirtualTime()
    canaries = [TimedRecorder(gap=1.0) for _ in range(5)]
    # Counted once the connections are open (a new one's writable turn, and the
    # commands that add and remove canaries, are once each), between sends.
    clock.mark(FIRST + 1.5)
    clock.mark(FIRST + 3.9)
    engine, connections = _run(monkeypatch, clock, 0.005, canaries, 4.5, stagger=0.2)
    for k, canary in enumerate(canaries):
        due = [FIRST + k * 0.2 + j for j in range(5) if k * 0.2 + j < 4.5]
        assert canary.asked == pytest.approx(due, abs=1e-9)
        assert len(canary.answers) == len(canary.asked)
        assert [at for at, _ in canary.answers] == canary.asked  # each its own answer
        assert _latencies(canary) == pytest.approx([0.005] * len(due), abs=1e-9)
    assert engine.sent == sum(len(c.asked) for c in canaries) == 23
    # A send's turn collects the answers come since (the one sent two sends before,
    # 0.4 s ago, past COLLECT_EARLY); answers read as they came would cost a turn each.
    (turns_before, sent_before), (turns_after, sent_after) = clock.marks.values()
    assert sent_after - sent_before == 12  # the sends between 1.5 s and 3.9 s
    assert turns_after - turns_before == sent_after - sent_before
    # Still one connection per model, reused: each answer was read before its model's
    # next send.
    assert connections == len(canaries)


def test_without_kernel_stamps_answers_are_read_as_they_come(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Breaks if answers wait for collection where the kernel gives no stamp (their
    latency would then include the wait)."""
    monkeypatch.setattr(engine_module, "stamp_arrivals", lambda sock: False)
    clock, canary = VirtualTime(), TimedRecorder(gap=1.0)
    _run(monkeypatch, clock, 0.01, [canary], 2.5)
    assert len(canary.answers) == len(canary.asked) == 3
    assert canary.delivered == pytest.approx([w + 0.01 for w in canary.woke], abs=1e-9)
    assert _latencies(canary) == pytest.approx([0.01] * 3, abs=1e-9)


def test_a_model_that_sends_again_sooner_has_its_answers_read_as_they_come(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Breaks if a model sending more often than the wait leaves its answers in the
    kernel (each send would find its connection busy and open another)."""
    clock, canary = VirtualTime(), TimedRecorder(gap=0.125)
    _, connections = _run(monkeypatch, clock, 0.005, [canary], 1.0)
    assert len(canary.answers) == len(canary.asked) == 8
    assert connections == 1
    assert canary.delivered == pytest.approx([w + 0.005 for w in canary.woke], abs=1e-9)


@pytest.mark.parametrize(("delay", "times_out"), [(0.03, False), (0.3, True)])
def test_a_timeout_shorter_than_the_wait_still_reads_an_answer_that_came_in_time(
    monkeypatch: pytest.MonkeyPatch, delay: float, times_out: bool
) -> None:
    """Breaks if an answer that came before the timeout, still unread in the kernel at
    the deadline, is reported as a timeout (or a late one as an answer)."""
    clock, canary = VirtualTime(), TimedRecorder(gap=1.0)
    _run(monkeypatch, clock, delay, [canary], 2.5, timeout=0.1)
    answers = [a for _, a in canary.answers]
    assert len(answers) == len(canary.asked) == 3
    # Read at the deadline either way: the answer waited in the kernel until then.
    assert canary.delivered == pytest.approx([w + 0.1 for w in canary.woke], abs=1e-9)
    if times_out:
        assert all(isinstance(a, TimeoutError) for a in answers)
    else:
        assert all(not isinstance(a, BaseException) and a[0] == 200 for a in answers)
        assert _latencies(canary) == pytest.approx([delay] * 3, abs=1e-9)
