"""Canary behaviour that needs a misbehaving server no real one reproduces on demand."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np
from tritonclient.utils import InferenceServerException

from tritonwatch.observations import Outcome
from tritonwatch.probe.canary import CanaryPlan, ModelCanary
from tritonwatch.probe.canary_stats import CanaryStats
from tritonwatch.probe.payload import Tensor

METADATA = {
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 2]}],
}


class _Result:
    def __init__(self, outputs: dict[str, Any]) -> None:
        self._outputs = outputs

    def as_numpy(self, name: str) -> Any:
        return self._outputs.get(name)


class ScriptedClient:
    """An InferenceClient whose infer answers come from a script, one per call."""

    protocol = "http"

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.binary_flags: list[bool] = []

    async def metadata(self, model: str, version: str) -> dict[str, Any]:
        return METADATA

    async def config(self, model: str, version: str) -> dict[str, Any] | None:
        return None  # a plain KServe v2 server: no Triton config API

    async def infer(
        self, model: str, version: str, tensors: Sequence[Tensor], *, binary: bool, timeout: float
    ) -> Any:
        self.binary_flags.append(binary)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def close(self) -> None:
        pass


PLAN = CanaryPlan(
    "t", "m", "", "http", "http://127.0.0.1:1", "grpc://127.0.0.1:2", 1.0, False, 1.0, 4, "zero"
)


def _run_once(client: ScriptedClient, calls: int = 1) -> tuple[CanaryStats, ModelCanary]:
    stats = CanaryStats()
    stats.declare([PLAN.key])
    canary = ModelCanary(PLAN, client, stats)

    async def go() -> None:
        assert await canary.prepare()
        loop = asyncio.get_running_loop()
        for _ in range(calls):
            await canary._one(loop.time())

    asyncio.run(go())
    return stats, canary


def test_a_response_missing_an_output_is_a_bad_response() -> None:
    stats, _ = _run_once(ScriptedClient([_Result({})]))
    assert stats.snapshot(0)[0].outcomes[Outcome.BAD_RESPONSE] == 1


def test_complete_response_is_a_success() -> None:
    stats, _ = _run_once(ScriptedClient([_Result({"y": np.zeros((1, 2))})]))
    assert stats.snapshot(0)[0].outcomes[Outcome.SUCCESS] == 1


def test_binary_refusal_falls_back_to_json_and_stays_there() -> None:
    """A KServe v2 server that rejects Triton's binary extension gets JSON tensors."""
    refusal = InferenceServerException("unsupported body", status="400")
    ok = _Result({"y": np.zeros((1, 2))})
    client = ScriptedClient([refusal, ok, ok])
    stats, _ = _run_once(client, calls=2)
    assert client.binary_flags == [True, False, False]
    assert stats.snapshot(0)[0].outcomes[Outcome.SUCCESS] == 2


def test_other_http_errors_do_not_switch_to_json() -> None:
    client = ScriptedClient([InferenceServerException("boom", status="500")])
    stats, _ = _run_once(client)
    assert client.binary_flags == [True]
    snap = stats.snapshot(0)[0]
    assert snap.outcomes[Outcome.HTTP_ERROR] == 1
    assert snap.latency_count == 0  # an error is no latency sample
