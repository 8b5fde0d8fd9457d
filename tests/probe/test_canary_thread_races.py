"""The canary's state shared between threads, each race held open on purpose.

Three threads touch a canary: the event loop's (``CanaryRunner._reconcile``, a canary's
prepare, second opinions and the library path), the engine's (``may_send`` and
``record`` for every engine canary) and a sweep job's (``CanaryRunner.set_paused``).
Each test holds one thread at the racy point with threading events, lets the other do
its part, then releases it: no sleeps, and the interleaving is the same on every run.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from canary_record_support import with_sender
from support import wait_until
from tritonwatch.probe import runner as canary_runner
from tritonwatch.probe.canary.breaker import BREAKER_FAILURES, BREAKER_PROBE_SECONDS
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.model_canary import ModelCanary
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.runner import CanaryRunner
from tritonwatch.probe.stream.stream_canary import StreamSender
from tritonwatch.state.canary_board import CanaryBoard

WAIT = 10.0
"""Real seconds a held thread or an awaited event may take (each takes milliseconds)."""
METADATA = {
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 2]}],
}
DECOUPLED = {"model_transaction_policy": {"decoupled": True}}


def _plan(**changes: Any) -> CanaryPlan:
    fields: dict[str, Any] = {
        "target": "t", "model": "m", "version": "", "protocol": "http",
        "http_url": "http://127.0.0.1:1", "grpc_url": "grpc://127.0.0.1:2", "rate": 1.0,
        "poisson": False, "timeout": 60.0, "max_in_flight": 1, "data": "zero",
    } | changes  # fmt: skip
    return CanaryPlan(**fields)


class FakeClient:
    """The runner's client for every plan: metadata and config as the test scripts them.

    ``metadata`` never answers while ``hold_metadata`` (the canary stays in prepare); once
    ``hold_on_cancel`` is set, the first canary cancelled there holds the event loop's
    thread (``cancelled`` set, until ``release``). ``config`` waits for ``config_gate``
    the first time, then answers ``config``."""

    protocol = "http"

    def __init__(self, *, hold_metadata: bool, config: dict[str, Any] | None = None) -> None:
        self.hold_metadata = hold_metadata
        self.config_answer = config
        self.hold_on_cancel = threading.Event()
        self.cancelled = threading.Event()
        self.release = threading.Event()
        self.config_gate = threading.Event()

    async def metadata(self, model: str, version: str) -> dict[str, Any]:
        if not self.hold_metadata:
            return METADATA
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if self.hold_on_cancel.is_set() and not self.cancelled.is_set():
                self.cancelled.set()
                assert self.release.wait(WAIT), "the test never released the loop"
            raise
        raise AssertionError("unreachable")

    async def config(self, model: str, version: str) -> dict[str, Any] | None:
        if not self.config_gate.is_set():
            await asyncio.to_thread(self.config_gate.wait, WAIT)
        return self.config_answer

    async def extensions(self) -> frozenset[str]:
        return frozenset()

    async def close(self) -> None:
        pass


@pytest.fixture
def runner() -> Iterator[CanaryRunner]:
    runner = CanaryRunner(CanaryBoard())
    yield runner
    runner.stop()


def _use(monkeypatch: pytest.MonkeyPatch, client: FakeClient) -> None:
    monkeypatch.setattr(canary_runner, "client_for", lambda *args, **kwargs: client)


def test_an_unpause_while_a_changed_canary_stops_reaches_its_replacement(
    runner: CanaryRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R2. Breaks if the sweep's resume, arriving while a reload stops the model's old
    canary, is lost: the replacement would stay paused for good, and a paused canary is
    exempt from the stalled check, so the model would go unwatched without a signal."""
    client = FakeClient(hold_metadata=True)
    _use(monkeypatch, client)
    before, after = _plan(rate=1.0), _plan(rate=2.0)  # a reload that restarts it
    runner.start([before])
    runner.set_paused("t", "m", True)  # a sweep of the model begins
    client.hold_on_cancel.set()
    applying = threading.Thread(target=runner.apply, args=([after],))
    applying.start()
    try:
        # The loop thread is held while the old canary unwinds: popped, not yet replaced.
        assert client.cancelled.wait(WAIT), "the old canary was never stopped"
        runner.set_paused("t", "m", False)  # the sweep ends, in the window
    finally:
        client.release.set()
        applying.join(WAIT)
    assert not applying.is_alive()
    replacement = runner.running()[after.key]
    assert replacement.plan == after
    assert replacement.paused is False
    assert replacement.may_send(0.0) is True


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A loopback server that takes connections (the kernel's backlog) and never answers.
    Requested before ``runner``: it closes after the runner stopped, so no canary hears
    its close."""
    silent = socket.create_server(("127.0.0.1", 0))
    yield f"http://127.0.0.1:{silent.getsockname()[1]}"
    silent.close()


def test_a_pause_while_a_canary_learns_its_model_streams_holds_its_streaming_sends(
    silent_url: str, runner: CanaryRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R2 (the sender chosen at prepare). Breaks if a pause that comes while the canary
    is still asking its model's config, before it knows the model is decoupled, does not
    hold the streaming sends it then makes (the stream would load the model through the
    sweep), or if the resume does not let them go again.

    The test only watches the answers the sending thread gets (asking ``may_send`` itself
    would make the test's thread the gates' owner, send_gates.py). Its server takes
    connections and never answers: a stream sent stays in flight, so no outcome reaches
    the breaker or the refusal watch, and the pause is the only gate that changes."""
    client = FakeClient(hold_metadata=False, config=DECOUPLED)
    _use(monkeypatch, client)
    plan = _plan(http_url=silent_url, rate=50.0)
    answers: list[bool] = []
    runner.start([plan])  # its canary waits in prepare for the config (config_gate)
    (canary,) = runner.running().values()
    assert canary.sender is None
    asked = canary.may_send

    def watched(intended: float) -> bool:
        answer = asked(intended)
        answers.append(answer)
        return answer

    monkeypatch.setattr(canary, "may_send", watched)
    runner.set_paused("t", "m", True)
    client.config_gate.set()  # the canary learns the model is decoupled
    wait_until(lambda: len(answers) >= 3, WAIT, "the streaming canary's scheduled sends")
    assert isinstance(canary.sender, StreamSender)
    assert runner.running()[plan.key] is canary  # the same canary: no hand-over
    assert canary.paused is True
    held = list(answers)
    runner.set_paused("t", "m", False)
    wait_until(lambda: True in answers, WAIT, "a send once resumed")
    assert held == [False] * len(held)
    (series,) = runner.board.snapshot(time.monotonic())
    assert sum(series.outcomes.values()) == 0  # no outcome moved another gate


class HeldTime(float):
    """A send time whose first ``>=`` holds the comparing thread (``entered`` set) until
    ``release``: the breaker's ``now >= open_until``, after it read the probe time and
    before it writes the next one."""

    def __init__(self, value: float) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def __ge__(self, other: float) -> bool:
        if not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(WAIT), "the test never released the engine thread"
        return float(self) >= other


class _Answer:
    """A decoded answer with every output asked for (the canary asks for none here)."""

    def as_numpy(self, name: str) -> Any:
        return None


def test_a_probe_decided_on_the_engine_thread_never_reopens_a_breaker_closed_meanwhile() -> None:
    """R3. Breaks if the breaker's probe, decided on the engine's thread, and an answer
    recorded on the event loop's (a second opinion) lose an update: the breaker would
    be open again (one request per probe period) just after an answer closed it, with
    the board saying closed."""
    stats = CanaryBoard()
    plan = _plan()
    stats.declare([plan.key])
    canary = ModelCanary(plan, FakeClient(hold_metadata=False), stats, engine=CanaryEngine())  # type: ignore[arg-type]
    with_sender(canary)
    for _ in range(BREAKER_FAILURES):
        canary.record(0.0, ConnectionRefusedError("refused"))
    assert canary.breaker_open and stats.open_circuits() == {plan.key}
    at = HeldTime(time.monotonic() + 1000.0)  # past the first probe time (its clock)
    sends: list[bool] = []

    def engine_thread() -> None:
        sends.append(canary.may_send(at))  # the probe
        sends.append(canary.may_send(at + 1.0))  # the next scheduled send

    engine = threading.Thread(target=engine_thread)
    engine.start()
    try:
        assert at.entered.wait(WAIT), "the engine thread never asked the breaker"
        canary.record(at, _Answer())  # an answer on the loop's thread closes the breaker
    finally:
        at.release.set()
        engine.join(WAIT)
    assert not engine.is_alive()
    assert sends == [True, True]  # the probe, then the whole load again
    assert not canary.breaker_open
    assert stats.open_circuits() == set()
    assert BREAKER_PROBE_SECONDS > 1.0  # (else the second send would be a probe anyway)
