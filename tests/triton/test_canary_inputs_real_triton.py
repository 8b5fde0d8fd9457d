"""The canary fills real Triton's models from their metadata and config, with no
``canary.inputs`` at all: what ``tritonwatch run --url`` meets on a server nobody
described. A model it cannot fill is skipped and the others run.

The skip is shown here with an input the config names and the model lacks: Triton 2.51
refuses to load a shape tensor outside TensorRT ("shape tensors are only supported for
TensorRT platform"), so the shape-tensor skip is tested on Triton's config form in
tests/probe/test_canary_inputs.py."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from canary_support import RecordingCanary, RecordingClient, canary_plan
from structlog.testing import capture_logs

from real_triton import RealTriton
from tritonwatch.config.canary_schema import InputOverride
from tritonwatch.kserve.payload import Tensor
from tritonwatch.probe.canary.clients import client_for
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.model_canary import run_canaries
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.records.observations import Outcome
from tritonwatch.state.canary_board import SKIPPED, CanaryBoard, SeriesSnapshot

pytestmark = pytest.mark.real
WAIT_SECONDS = 30.0
RESULTS = 5
RATE = 20.0
FILLABLE = ("batching", "dynamic_shape", "text", "optional_input")


Exchanges = list[tuple[list[Tensor], Any]]


def _run_all(
    plans: Sequence[CanaryPlan], waiting_for: Sequence[str]
) -> tuple[dict[str, SeriesSnapshot], dict[str, Exchanges], CanaryBoard]:
    """Runs every plan's canary together, from one engine as the daemon's, until each
    model in ``waiting_for`` has :data:`RESULTS` results; each model's exchanges (the
    answers decoded, with the tensors of their requests)."""
    stats = CanaryBoard()
    stats.declare(plan.key for plan in plans)
    engine = CanaryEngine()

    def series() -> dict[str, SeriesSnapshot]:
        return {snap.model: snap for snap in stats.snapshot(0)}

    async def go() -> dict[str, Exchanges]:
        clients = {
            plan.model: RecordingClient(client_for(plan.protocol, plan.http_url, plan.grpc_url))
            for plan in plans
        }
        canaries = {
            plan.model: RecordingCanary(plan, clients[plan.model], stats, seed=1, engine=engine)
            for plan in plans
        }
        task = asyncio.create_task(run_canaries(list(canaries.values())))
        try:
            async with asyncio.timeout(WAIT_SECONDS):
                while any(
                    sum(series()[model].outcomes.values()) < RESULTS for model in waiting_for
                ):
                    await asyncio.sleep(0.01)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            for client in clients.values():
                await client.close()
        return {model: canary.exchanges() for model, canary in canaries.items()}

    try:
        exchanges = asyncio.run(go())
    finally:
        engine.stop()
    return series(), exchanges, stats


def _only_successes(snap: SeriesSnapshot) -> None:
    assert snap.outcomes[Outcome.SUCCESS] >= RESULTS, snap
    assert sum(snap.outcomes.values()) == snap.outcomes[Outcome.SUCCESS], snap.last_error


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_every_model_runs_with_no_inputs_config_and_one_it_cannot_fill_is_skipped(
    real_triton: RealTriton, protocol: str
) -> None:
    """Breaks if the canary needs hand-written inputs for a batching, a dynamic-shape, a
    BYTES or an optional-input model, or if one unfillable model stops the others."""
    wrong = canary_plan(real_triton, "flaky", protocol, inputs={"MASK": InputOverride()}, rate=RATE)
    plans = [*(canary_plan(real_triton, model, protocol, rate=RATE) for model in FILLABLE), wrong]
    with capture_logs() as logs:
        series, exchanges, stats = _run_all(plans, FILLABLE)
    for model in FILLABLE:
        _only_successes(series[model])

    sent = {model: [(t.name, t.shape) for t in exchanges[model][0][0]] for model in FILLABLE}
    assert sent == {
        "batching": [("INPUT0", (1, 16))],  # the batch dim is 1
        "dynamic_shape": [("SEQUENCE", (1, 1))],  # the dynamic dim is 1
        "text": [("TEXT", (1, 1))],
        "optional_input": [("INPUT0", (1, 4))],  # MASK, optional, left out
    }
    for model, output in (("batching", "OUTPUT0"), ("dynamic_shape", "SEQUENCE_OUT")):
        for tensors, result in exchanges[model]:
            np.testing.assert_array_equal(result.as_numpy(output), tensors[0].data)
    for tensors, result in exchanges["text"]:
        (text,) = tensors[0].values()
        assert len(text) == 128  # perf_analyzer's --string-length default
        assert result.as_numpy("TEXT_OUT").tolist() == [[text]]
    # Triton answered MASK_OUT from INPUT0: it got no MASK (identity.py's rule).
    for tensors, result in exchanges["optional_input"]:
        np.testing.assert_array_equal(result.as_numpy("MASK_OUT"), tensors[0].data)

    reason = "input 'MASK': no such input (the model has: INPUT0)"
    skipped = [log for log in logs if log["event"] == "canary_skipped"]
    assert [(log["target"], log["model"], log["reason"]) for log in skipped] == [
        ("triton", "flaky", reason)
    ]
    assert stats.skipped() == {("triton", "flaky", protocol): reason}
    flaky = series["flaky"]
    assert sum(flaky.outcomes.values()) == 0
    assert flaky.last_error is not None
    assert (flaky.last_error.outcome, flaky.last_error.error) == (SKIPPED, reason)
    assert not exchanges["flaky"]


def test_an_optional_input_named_in_the_config_is_sent(real_triton: RealTriton) -> None:
    """Breaks if ``canary.inputs.MASK`` stops bringing the optional input back."""
    plan = canary_plan(
        real_triton, "optional_input", "http", inputs={"MASK": InputOverride()}, rate=RATE
    )
    series, exchanges, _ = _run_all([plan], ["optional_input"])
    _only_successes(series["optional_input"])
    assert exchanges["optional_input"]
    for tensors, result in exchanges["optional_input"]:
        assert [(t.name, t.shape) for t in tensors] == [("INPUT0", (1, 4)), ("MASK", (1, 4))]
        np.testing.assert_array_equal(result.as_numpy("MASK_OUT"), tensors[1].data)
        assert not np.array_equal(tensors[0].data, tensors[1].data)
