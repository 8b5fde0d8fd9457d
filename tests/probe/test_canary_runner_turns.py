"""CanaryRunner.apply: reconciles run one at a time, in the order applied (R4).

An apply that gave up waiting (its reconcile slower than the apply's time-out, or two
callers at once) must not let its reconcile interleave with the next one: both would
start a canary for the same series, and the one overwritten in the runner's table
would keep sending, stopped by nobody. The canaries here run a stand-in for
``run_canaries`` whose cancellation can be held, so a reconcile is held exactly where
it awaits the canaries it stops — no server, no sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from support import wait_until
from tritonwatch.probe import runner as canary_runner
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.runner import CanaryRunner
from tritonwatch.state.canary_board import CanaryBoard

WAIT = 30.0
"""Real seconds a wait may take (what it waits for takes milliseconds)."""


class FakeClient:
    async def close(self) -> None:
        pass


class HeldCanaries:
    """Stands in for ``run_canaries``: runs until cancelled, counting who is alive; while
    :attr:`hold` is set, a cancelled one waits for :attr:`release` before it ends."""

    def __init__(self) -> None:
        self.alive: list[Any] = []
        self.hold = False
        self.cancelling = threading.Event()
        self.release = threading.Event()

    async def __call__(self, canaries: Sequence[Any]) -> None:
        self.alive.extend(canaries)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if self.hold:
                self.cancelling.set()
                await asyncio.to_thread(self.release.wait, WAIT)
            raise
        finally:
            for canary in canaries:
                self.alive.remove(canary)


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> HeldCanaries:
    stand_in = HeldCanaries()
    monkeypatch.setattr(canary_runner, "run_canaries", stand_in)
    monkeypatch.setattr(canary_runner, "client_for", lambda *_, **__: FakeClient())
    # The stop waits for cancelled canaries as long as the hold may last: the hold, not
    # a real-time bound, decides when the first reconcile goes on.
    monkeypatch.setattr(canary_runner, "STOP_TIMEOUT_SECONDS", 2 * WAIT)
    return stand_in


@pytest.fixture
def runner() -> Iterator[CanaryRunner]:
    runner = CanaryRunner(CanaryBoard())
    yield runner
    runner.stop()


def _plan(rate: float, model: str = "m") -> CanaryPlan:
    return CanaryPlan(
        target="t",
        model=model,
        version="",
        protocol="grpc",
        http_url="http://127.0.0.1:1",
        grpc_url="grpc://127.0.0.1:1",
        rate=rate,
        poisson=False,
        timeout=1.0,
        max_in_flight=1,
        data="random",
    )


def _apply_on_a_thread(runner: CanaryRunner, plans: list[CanaryPlan]) -> threading.Thread:
    def apply() -> None:
        with contextlib.suppress(TimeoutError):  # gave up waiting: it lands in its turn
            runner.apply(plans)

    thread = threading.Thread(target=apply, daemon=True)
    thread.start()
    return thread


def test_a_reconcile_given_up_on_never_interleaves_with_the_next(
    runner: CanaryRunner, held: HeldCanaries, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Breaks if a second apply's reconcile runs while the first is still stopping the
    old canary: the first, resuming after it, starts what the second removed — the
    later apply undone, a canary sending for a model no longer configured."""
    first, changed, extra = _plan(1.0), _plan(2.0), _plan(1.0, model="n")
    runner.start([first])
    wait_until(lambda: len(held.alive) == 1, WAIT, "the first canary running")
    monkeypatch.setattr(canary_runner, "APPLY_TIMEOUT_SECONDS", 0.01, raising=False)
    held.hold = True
    slow = _apply_on_a_thread(runner, [changed, extra])  # held stopping the first canary
    assert held.cancelling.wait(WAIT), "the first reconcile never stopped the canary"
    held.hold = False
    _apply_on_a_thread(runner, [changed]).join(WAIT)  # the next apply: done or given up on
    held.release.set()
    slow.join(WAIT)  # (an apply that waited returns once its reconcile is done)

    def as_last_applied() -> bool:
        running = runner.running()
        plans = [canary.plan for canary in running.values()]
        return plans == [changed] and held.alive == list(running.values())

    wait_until(as_last_applied, WAIT, "the last apply's canary, and it alone, running")


def test_a_slow_reconcile_times_the_apply_out_and_still_lands(
    runner: CanaryRunner, held: HeldCanaries, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Breaks if an apply that outlives its time-out hangs its caller, raises something
    the daemon cannot tell from the reconcile's own failure, or cancels the reconcile
    (leaving the canaries half changed) instead of letting it land."""
    first, changed = _plan(1.0), _plan(2.0)
    runner.start([first])
    wait_until(lambda: len(held.alive) == 1, WAIT, "the first canary running")
    monkeypatch.setattr(canary_runner, "APPLY_TIMEOUT_SECONDS", 0.01)
    held.hold = True
    with pytest.raises(canary_runner.ApplyTimeoutError):
        runner.apply([changed])
    assert held.cancelling.wait(WAIT)
    held.release.set()
    wait_until(
        lambda: [c.plan for c in runner.running().values()] == [changed],
        WAIT,
        "the timed-out reconcile to land",
    )
