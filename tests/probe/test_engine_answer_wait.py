"""Answers left in the kernel until the engine collects them (``ANSWER_WAIT``).

The kernel stamps each answer's arrival, so the engine need not wake the moment it
comes: a model that sends again only later has its answer read at the next send's
wake-up (or ``ANSWER_WAIT`` after its own send), with others. These tests hold the
engine to what that may and may not change: the latency (from the stamp, not the
read), the outcome (an answer that came in time is no timeout), and where it must not
wait (no stamps; a model that sends again sooner).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import pytest
from engine_support import OK, REQUEST, Recorder, answer_each, raw_server

from tritonwatch.probe import canary_engine as engine_module
from tritonwatch.probe.canary_engine import ANSWER_WAIT, CanaryEngine, RawAnswer


@dataclass
class TimedRecorder(Recorder):
    """A :class:`Recorder` that also notes when each answer was handed over."""

    delivered: list[float] = field(default_factory=list)

    def answered(self, intended: float, answer: RawAnswer | BaseException, woke: float) -> None:
        self.delivered.append(time.monotonic())
        super().answered(intended, answer, woke)


def _run(
    port: int, canaries: list[TimedRecorder], seconds: float, *, timeout: float = 2.0,
    stagger: float = 0.0, marks: list[tuple[int, int]] | None = None,
) -> CanaryEngine:  # fmt: skip
    """Serves every canary on one engine for ``seconds`` (the k-th's first send
    ``k * stagger`` after the first's), then waits until each sent request is answered;
    returns the stopped engine. ``marks`` gets the engine's (turns, sent) once every
    connection is open (after 1.5 s) and at ``seconds``: the steady state between."""
    engine = CanaryEngine()

    async def main() -> None:
        first = time.monotonic() + 0.05
        tasks = [
            asyncio.create_task(
                engine.serve(
                    canary,
                    "127.0.0.1",
                    port,
                    REQUEST,
                    timeout=timeout,
                    max_in_flight=4,
                    first_send=first + k * stagger,
                )
            )
            for k, canary in enumerate(canaries)
        ]
        await asyncio.sleep(1.5)
        if marks is not None:
            marks.append((engine.turns, engine.sent))
        await asyncio.sleep(seconds - 1.5)
        if marks is not None:
            marks.append((engine.turns, engine.sent))
        for canary in canaries:
            canary.allow = False
        limit = time.monotonic() + 10
        while time.monotonic() < limit and any(len(c.answers) < len(c.asked) for c in canaries):
            await asyncio.sleep(0.02)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    try:
        asyncio.run(main())
    finally:
        engine.stop()
    return engine


def _latencies(canary: Recorder) -> list[float]:
    return [a[3] - w for (_, a), w in zip(canary.answers, canary.woke, strict=True)
            if not isinstance(a, BaseException)]  # fmt: skip


def test_an_answer_read_later_keeps_the_time_it_arrived() -> None:
    """Breaks if an answer left in the kernel is timed to its read (latency would grow
    by the wait), or if the engine still wakes for each answer (no wait at all)."""
    canary = TimedRecorder(gap=1.0)
    with raw_server(answer_each(OK, delay=0.01)) as server:
        _run(server.port, [canary], 2.2)
    assert len(canary.answers) == len(canary.asked) >= 3
    assert all(not isinstance(a, BaseException) and a[0] == 200 for _, a in canary.answers)
    # Handed over only when collected: ANSWER_WAIT after the send, its own wake-up.
    for woke, delivered in zip(canary.woke, canary.delivered, strict=True):
        assert delivered >= woke + ANSWER_WAIT - 0.001
    # …yet timed from the kernel's stamp: the server's 10 ms, not the wait.
    assert all(0.009 <= latency < ANSWER_WAIT - 0.05 for latency in _latencies(canary))


def test_the_answers_of_several_models_cost_about_one_wake_up_per_request() -> None:
    """Breaks if each answer still wakes the thread on its own (two or more turns per
    request), or if answers collected together get lost or mixed up."""
    canaries = [TimedRecorder(gap=1.0) for _ in range(5)]
    with raw_server(answer_each(OK, delay=0.005)) as server:
        marks: list[tuple[int, int]] = []
        engine = _run(server.port, canaries, 4.5, stagger=0.2, marks=marks)
    sent = sum(len(c.asked) for c in canaries)
    assert sent >= 15
    assert all(len(c.answers) == len(c.asked) for c in canaries)
    assert all(not isinstance(a, BaseException) for c in canaries for _, a in c.answers)
    assert engine.sent == sent
    # A send's turn collects the answers come since; answers read as they came would
    # cost a second turn each. (Counted once the connections are open: a new one's
    # writable turn, and the commands that add and remove canaries, are once each.)
    (turns_before, sent_before), (turns_after, sent_after) = marks
    assert sent_after - sent_before >= 10
    assert turns_after - turns_before <= 1.3 * (sent_after - sent_before)
    # Still one connection per model, reused: each answer was read before its model's
    # next send.
    assert server.connections == len(canaries)


def test_without_kernel_stamps_answers_are_read_as_they_come(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Breaks if answers wait for collection where the kernel gives no stamp (their
    latency would then include the wait)."""
    monkeypatch.setattr(engine_module, "stamp_arrivals", lambda sock: False)
    canary = TimedRecorder(gap=1.0)
    with raw_server(answer_each(OK, delay=0.01)) as server:
        _run(server.port, [canary], 2.2)
    assert len(canary.answers) == len(canary.asked) >= 3
    for woke, delivered in zip(canary.woke, canary.delivered, strict=True):
        assert delivered < woke + ANSWER_WAIT - 0.05


def test_a_model_that_sends_again_sooner_has_its_answers_read_as_they_come() -> None:
    """Breaks if a model sending more often than the wait leaves its answers in the
    kernel (each send would find its connection busy and open another)."""
    canary = TimedRecorder(gap=0.1)
    with raw_server(answer_each(OK, delay=0.005)) as server:
        _run(server.port, [canary], 1.0)
    assert len(canary.answers) == len(canary.asked) >= 8
    assert server.connections == 1
    for woke, delivered in zip(canary.woke, canary.delivered, strict=True):
        assert delivered < woke + 0.1


@pytest.mark.parametrize(("delay", "times_out"), [(0.03, False), (0.3, True)])
def test_a_timeout_shorter_than_the_wait_still_reads_an_answer_that_came_in_time(
    delay: float, times_out: bool
) -> None:
    """Breaks if an answer that came before the timeout, still unread in the kernel at
    the deadline, is reported as a timeout (or a late one as an answer)."""
    canary = TimedRecorder(gap=1.0)
    with raw_server(answer_each(OK, delay=delay)) as server:
        _run(server.port, [canary], 2.2, timeout=0.1)
    answers = [a for _, a in canary.answers]
    assert len(answers) == len(canary.asked) >= 3
    if times_out:
        assert all(isinstance(a, TimeoutError) for a in answers)
    else:
        assert all(not isinstance(a, BaseException) and a[0] == 200 for a in answers)
        assert all(delay - 0.001 <= latency < 0.1 for latency in _latencies(canary))
