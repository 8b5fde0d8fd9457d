"""CanaryRunner.apply against the simulator: only what changed stops, starts or restarts.

A model discovered, unloaded or reloaded re-applies the config; the canaries of the
other models must run on — the same object, no new metadata round trip, their series
counting on — or every discovery change would put a gap in every model's SLI.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from support import wait_until
from tritonwatch.config.canary_schema import InputOverride
from tritonwatch.probe import runner as canary_runner
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.runner import CanaryRunner
from tritonwatch.sim.server import Simulator
from tritonwatch.state.canary_board import CanaryBoard

pytestmark = pytest.mark.sim
TARGET = "sim"


class CountingClient:
    """The canary's real client, counting the metadata round trips of each model (one
    per prepare: a canary kept across an apply makes none)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.metadata_calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def metadata(self, model: str, version: str) -> Any:
        self.metadata_calls[model] = self.metadata_calls.get(model, 0) + 1
        return await self._inner.metadata(model, version)


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> list[CountingClient]:
    """Every client the runner makes, wrapped in a :class:`CountingClient`."""
    made: list[CountingClient] = []
    real = canary_runner.client_for

    def counting_client_for(*args: Any, **kwargs: Any) -> Any:
        client = CountingClient(real(*args, **kwargs))
        made.append(client)
        return client

    monkeypatch.setattr(canary_runner, "client_for", counting_client_for)
    return made


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator() as simulator:
        yield simulator


@pytest.fixture
def runner() -> Iterator[CanaryRunner]:
    runner = CanaryRunner(CanaryBoard())
    yield runner
    runner.stop()


def _plan(sim: Simulator, model: str, **changes: Any) -> CanaryPlan:
    fields: dict[str, Any] = {
        "target": TARGET,
        "model": model,
        "version": "",
        "protocol": "http",
        "http_url": sim.http_url,
        "grpc_url": f"grpc://{sim.grpc_url}",
        "rate": 20.0,
        "poisson": False,
        "timeout": 2.0,
        "max_in_flight": 4,
        "data": "random",
    } | changes
    return CanaryPlan(**fields)


def _successes(runner: CanaryRunner) -> dict[str, int]:
    return {s.model: s.outcomes["success"] for s in runner.board.snapshot(time.monotonic())}


def _wait_successes(runner: CanaryRunner, model: str, at_least: int) -> None:
    wait_until(
        lambda: _successes(runner).get(model, 0) >= at_least,
        timeout=20,
        what=f"{at_least} canary successes of {model}",
    )


def _prepares(clients: list[CountingClient], model: str) -> int:
    return sum(client.metadata_calls.get(model, 0) for client in clients)


def test_an_unchanged_canary_runs_on_while_others_stop_and_start(
    sim: Simulator, runner: CanaryRunner, clients: list[CountingClient]
) -> None:
    """Breaks if apply restarts a canary whose plan is the same (new object, a second
    prepare, its count reset), keeps a removed one's series, or fails to start a new one."""
    simple, resnet = _plan(sim, "simple"), _plan(sim, "resnet50")
    runner.start([simple, resnet])
    _wait_successes(runner, "simple", 5)
    _wait_successes(runner, "resnet50", 1)
    kept = runner.running()[simple.key]
    before = _successes(runner)["simple"]

    runner.apply([simple, _plan(sim, "text_identity")])

    assert runner.running()[simple.key] is kept
    assert set(runner.running()) == {simple.key, (TARGET, "text_identity", "http")}
    assert _successes(runner)["simple"] >= before  # counting on, not from zero
    assert "resnet50" not in _successes(runner)  # its series are gone
    _wait_successes(runner, "simple", before + 10)
    _wait_successes(runner, "text_identity", 1)
    assert _prepares(clients, "simple") == 1
    assert "resnet50" not in _successes(runner)  # and no late result brought them back


def test_a_changed_plan_or_revision_restarts_that_canary_only(
    sim: Simulator, runner: CanaryRunner, clients: list[CountingClient]
) -> None:
    """Breaks if a model reloaded differently (its revision changed) or re-planned keeps
    its old canary and request, if the others restart with it, or if the series of a
    restarted one starts over."""
    simple, resnet = _plan(sim, "simple"), _plan(sim, "resnet50")
    runner.start([simple, resnet], {(TARGET, "simple"): "loaded-1"})
    _wait_successes(runner, "simple", 3)
    _wait_successes(runner, "resnet50", 3)
    first = runner.running()
    before = _successes(runner)["simple"]

    runner.apply([simple, resnet], {(TARGET, "simple"): "loaded-2"})
    second = runner.running()
    assert second[simple.key] is not first[simple.key]
    assert second[resnet.key] is first[resnet.key]
    assert _successes(runner)["simple"] >= before
    _wait_successes(runner, "simple", before + 3)
    assert (_prepares(clients, "simple"), _prepares(clients, "resnet50")) == (2, 1)

    slower = _plan(sim, "resnet50", rate=10.0)
    runner.apply([simple, slower], {(TARGET, "simple"): "loaded-2"})
    third = runner.running()
    assert third[simple.key] is second[simple.key]
    assert third[resnet.key] is not second[resnet.key]
    assert third[resnet.key].plan == slower


def test_a_restarted_canary_stays_paused_and_a_skipped_one_tries_again(
    sim: Simulator, runner: CanaryRunner, clients: list[CountingClient]
) -> None:
    """Breaks if a restart drops the pause of a model being swept (the sweep's load would
    mix with the canary's), or if a skipped canary is never prepared again on apply (a
    sample file fixed in place, then SIGHUP, must be read)."""
    simple = _plan(sim, "simple")
    unfillable = _plan(sim, "resnet50", inputs={"NOT_AN_INPUT": InputOverride(shape=(1,))})
    runner.start([simple, unfillable])
    wait_until(runner.board.skipped, timeout=20, what="the skipped canary")
    runner.set_paused(TARGET, "simple", True)

    runner.apply([simple, unfillable], {(TARGET, "simple"): "reloaded"})

    assert runner.running()[simple.key].paused is True
    wait_until(
        lambda: (_prepares(clients, "simple"), _prepares(clients, "resnet50")) == (2, 2),
        timeout=20,
        what="both prepared again",
    )
