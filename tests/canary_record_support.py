"""A canary made without a server, for tests that hand it its requests' ends themselves.

The engine ends each request with ``canary.record(intended, answer, woke)`` (a raw
answer: an HTTP ``(status, headers, body, received)`` tuple, a ``GrpcAnswer``, or the
exception the request failed with), the library path with a decoded result. These
tests call ``record`` the same way, on a canary prepared from scripted model APIs
(:func:`prepared`: the real prepare, the real clients' request encoding) or given a
plain sender at once (:func:`with_sender`: no model APIs asked at all).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from tritonwatch.probe.canary.clients import GrpcInferenceClient, HttpInferenceClient
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.engine_wires import HttpAnswer
from tritonwatch.probe.canary.inference_client import InferenceClient
from tritonwatch.probe.canary.library_path import LibraryCall
from tritonwatch.probe.canary.model_canary import ModelCanary
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.canary.unary import UnarySender
from tritonwatch.state.canary_board import CanaryBoard
from tritonwatch.wire.limits import AnswerLimits

WAIT = 10.0
"""Real seconds a wait for a recorded outcome may take (each takes milliseconds)."""
METADATA = {
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 2]}],
}
OK_BODY = json.dumps(
    {"outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 2], "data": [0.5, 1.5]}]}
).encode()
"""A JSON infer answer holding the output ``y`` that :data:`METADATA` lists."""


class ScriptedApi:
    """Stands in for a target's model APIs (``CanaryModelApi``): metadata, config and
    the server's extensions as the test scripts them."""

    def __init__(
        self,
        metadata: dict[str, Any] | None = None,
        config: dict[str, Any] | None = None,
        extensions: frozenset[str] = frozenset({"binary_tensor_data"}),
    ) -> None:
        self._metadata = METADATA if metadata is None else metadata
        self._config = config  # None: a plain KServe v2 server, no config API
        self._extensions = extensions

    async def extensions(self) -> frozenset[str]:
        return self._extensions

    async def metadata(self, model: str, version: str) -> dict[str, Any]:
        return self._metadata

    async def config(self, model: str, version: str) -> dict[str, Any] | None:
        return self._config

    def close(self) -> None:
        pass


def scripted_client(plan: CanaryPlan, api: ScriptedApi | None = None) -> InferenceClient:
    """The real client of ``plan``'s protocol (its requests encoded as sent) over ``api``."""
    apis: Any = ScriptedApi() if api is None else api
    if plan.protocol == "grpc":
        return GrpcInferenceClient(plan.grpc_url, apis)
    return HttpInferenceClient(plan.http_url, apis)


def library_answers(client: InferenceClient, call: LibraryCall) -> list[bytes]:
    """Makes ``client``'s library path answer with ``call`` (its timeout in, a result
    or a raise out); returns the list of the encoded requests it was made for."""
    made: list[bytes] = []

    def library_call(encoded: bytes, limits: AnswerLimits) -> LibraryCall:
        made.append(encoded)
        return call

    client.library_call = library_call  # type: ignore[method-assign]
    return made


async def prepared(
    plan: CanaryPlan, client: InferenceClient, stats: CanaryBoard, **options: Any
) -> ModelCanary:
    """A canary of ``plan`` prepared as ``run`` prepares one (on the running loop, which
    then asks the second opinions), from an engine never served."""
    canary = ModelCanary(plan, client, stats, engine=CanaryEngine(), **options)
    canary.sender = await canary.prepare()
    assert canary.sender is not None, stats.skipped()
    return canary


def with_sender(
    canary: ModelCanary, *, outputs: tuple[str, ...] = (), binary: bool = True
) -> UnarySender:
    """Gives ``canary`` a plain sender at once (``outputs`` the outputs its answers must
    hold), its client never asked: no second opinion is asked off a loop, so an answer
    our reader refused is recorded as the reader's error."""
    sender = UnarySender(
        canary.plan,
        canary._client,
        canary._stats,
        canary,
        tensors=[],
        requests=None,
        outputs=list(outputs),
        binary=binary,
        clock=canary._clock,
    )
    canary.sender = sender
    return sender


def http_answer(body: bytes = OK_BODY, status: int = 200, **headers: str) -> HttpAnswer:
    """An HTTP answer as the engine hands it over, its last byte in now."""
    return status, dict(headers), body, time.monotonic()


def total_outcomes(stats: CanaryBoard) -> int:
    return sum(stats.snapshot(time.monotonic())[0].outcomes.values())


async def until(done: Callable[[], bool], what: str) -> None:
    """Waits (real time, up to :data:`WAIT`) until ``done``; fails naming ``what``."""
    deadline = time.monotonic() + WAIT
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)
