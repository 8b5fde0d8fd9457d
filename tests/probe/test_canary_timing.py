"""When the canary sends and what its latency spans: from the intended send time (never
earlier), to the answer's last byte (not to the end of decoding it)."""

from __future__ import annotations

import asyncio
import ctypes
import sys
import threading
import time
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import numpy as np
import pytest

from tritonwatch.common import precise_loop
from tritonwatch.probe.canary import timer_slack
from tritonwatch.probe.canary import timing as canary_timing
from tritonwatch.probe.canary.model_canary import ModelCanary
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.infer_response import InferResponse
from tritonwatch.probe.payload import Tensor
from tritonwatch.probe.runner import CanaryRunner
from tritonwatch.records.observations import Outcome
from tritonwatch.state.canary_board import CanaryBoard

pytestmark = pytest.mark.real

PLAN = CanaryPlan("t", "m", "", "http", "http://127.0.0.1:9", "", 10.0, False, 5.0, 1, "zero")
DECODE_SECONDS = 0.05
T = TypeVar("T")


class StampingClient:
    """Answers after ``wait`` seconds, stamped then, and spends ``DECODE_SECONDS`` of CPU
    after the stamp as a slow decoder would; keeps the loop time of every call."""

    protocol = "http"

    def __init__(self, wait: float = 0.01) -> None:
        self.wait = wait
        self.called_at: list[float] = []
        self.received: list[float] = []

    async def infer(
        self, model: str, version: str, tensors: Sequence[Tensor], *, binary: bool, timeout: float
    ) -> Any:
        loop = asyncio.get_running_loop()
        self.called_at.append(loop.time())
        await asyncio.sleep(self.wait)
        received = loop.time()
        self.received.append(received)
        time.sleep(DECODE_SECONDS)  # decoding: client CPU after the last byte
        return InferResponse({"y": np.zeros(1, dtype=np.float32)}, received_at=received)


def _run(main: Coroutine[Any, Any, T]) -> T:
    """``main`` on the canary's own kind of loop, closed afterwards."""
    with asyncio.Runner(loop_factory=canary_timing.new_event_loop) as runner:
        return runner.run(main)


def _canary(client: StampingClient, stats: CanaryBoard) -> ModelCanary:
    stats.declare([PLAN.key])
    canary = ModelCanary(PLAN, client, stats)  # type: ignore[arg-type]
    canary._outputs = ["y"]
    return canary


def test_latency_runs_from_the_wake_up_to_the_last_byte() -> None:
    """Breaks if decoding the answer counts as latency (perf_analyzer does not count it),
    or if the canary's own send lateness goes into the latency instead of beside it."""
    client, stats = StampingClient(), CanaryBoard()

    async def main() -> float:
        canary = _canary(client, stats)
        intended = asyncio.get_running_loop().time() + 0.02
        await canary._one(intended)
        return intended

    intended = _run(main())
    (latency,) = stats.samples_between("t", "m", 0, float("inf"))
    (snap,) = stats.snapshot(time.monotonic())
    assert snap.send_lateness_count == 1
    assert 0.0 <= snap.send_lateness_sum <= client.called_at[0] - intended  # woke, then sent
    assert latency + snap.send_lateness_sum == pytest.approx(client.received[0] - intended)
    assert latency < DECODE_SECONDS  # the decoder's time is not in it
    assert client.called_at[0] >= intended  # never sent before its time


def test_a_request_waiting_for_a_slot_counts_from_its_intended_time() -> None:
    """Breaks if the canary reintroduces coordinated omission: a request held back by a
    slow answer (one slot) must carry the wait in its latency."""
    client, stats = StampingClient(wait=0.2), CanaryBoard()

    async def main() -> list[float]:
        canary = _canary(client, stats)
        now = asyncio.get_running_loop().time()
        intended = [now + 0.01, now + 0.02]
        await asyncio.gather(*(canary._one(at) for at in intended))
        return intended

    intended = _run(main())
    latencies = sorted(stats.samples_between("t", "m", 0, float("inf")))
    snap = stats.snapshot(time.monotonic())[0]
    waited = sum(received - at for received, at in zip(client.received, intended, strict=True))
    assert sum(latencies) + snap.send_lateness_sum == pytest.approx(waited)
    assert latencies[1] >= 0.2 + 0.2 - 0.01  # its own answer and the one before it
    assert snap.outcomes[Outcome.SUCCESS] == 2


def test_sleep_until_never_returns_early() -> None:
    """Breaks if the spin ends before the send time (the canary would send early and
    under-report), for deadlines inside and beyond the spin."""

    async def main() -> list[tuple[float, float]]:
        loop = asyncio.get_running_loop()
        seen = []
        timer = canary_timing.WakeTimer()
        for ahead in (0.0, 1e-4, canary_timing.SPIN_SECONDS, 0.002, 0.01) * 8:
            when = loop.time() + ahead
            await timer.sleep_until(when)
            seen.append((when, loop.time()))
        return seen

    for when, woke in _run(main()):
        assert woke >= when


def test_the_spin_is_as_long_as_recent_lateness_needs() -> None:
    """Breaks if the spin stops following the loop's recent oversleep (30 of the last
    32, capped): a fixed 0.3 ms spin per request is CPU a quiet host wastes, and a spin
    covering only three in four (the old upper quartile) left the p95 late."""
    timer = canary_timing.WakeTimer(cap=3e-4)
    assert timer.spin_seconds == 3e-4  # nothing measured yet: the full spin
    for lateness in [10e-6] * 24 + [40e-6] * 6 + [90e-6] * 2:  # quiet, now and then later
        timer.record(lateness)
    assert timer.spin_seconds == 90e-6  # the 31st of 32 sorted: the two latest covered
    for lateness in [10e-6] * 29 + [90e-6] * 1 + [40e-6] * 2:
        timer.record(lateness)
    assert timer.spin_seconds == 40e-6  # one outlier in 32 is left out
    for lateness in [-5e-6] * 32:  # woke early (the clock's resolution): on time
        timer.record(lateness)
    assert timer.spin_seconds == 0.0
    for lateness in [2e-3] * 32:  # a busy host: never more than the cap
        timer.record(lateness)
    assert timer.spin_seconds == 3e-4


@pytest.mark.skipif(sys.platform != "linux", reason="timer slack is a Linux setting")
def test_the_thread_asks_linux_for_a_tight_timer_slack() -> None:
    """Breaks if tighten_timer_slack stops setting the calling thread's slack to 1 ns
    (select() then wakes up to 50 µs later by design; p95 0.8 ms late on the test VM),
    or sets another thread's."""
    libc = ctypes.CDLL(None)
    pr_get_timerslack = 30
    before = libc.prctl(pr_get_timerslack, 0, 0, 0, 0)
    seen: list[tuple[bool, int]] = []

    def probe() -> None:
        seen.append((timer_slack.tighten_timer_slack(), libc.prctl(pr_get_timerslack, 0, 0, 0, 0)))

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join(5)
    assert seen == [(True, 1)]
    assert libc.prctl(pr_get_timerslack, 0, 0, 0, 0) == before  # this thread untouched


@pytest.mark.skipif(sys.platform != "linux", reason="the precise selector is Linux-only")
def test_the_runner_loop_has_the_precise_selector() -> None:
    """Breaks if the canary's loop goes back to the default selector, whose waits CPython
    rounds up to the next millisecond (0.75 ms added to a median canary latency)."""
    runner = CanaryRunner(CanaryBoard())
    try:
        selector = runner._loop._selector  # type: ignore[attr-defined]
        assert isinstance(selector, precise_loop.PreciseEpollSelector)
    finally:
        runner.stop()
