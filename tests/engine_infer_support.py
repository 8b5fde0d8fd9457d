"""One infer sent as the canary sends it, for tests that ask what one request got.

The canary's requests leave from its engine (probe/canary/engine.py): the client's own
encoded request (``infer_request``, then ``wire_request``) on the client's
``engine_endpoint``, in clear or over TLS, its raw answer decoded as the canary's sender
decodes it (``http_infer_answer``, ``grpc_infer_answer``). :func:`engine_infer` does
exactly that for one request, on an engine of its own; :func:`library_infer` sends the
same bytes through the client's library path (``urllib3``, ``grpcio``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from tritonwatch.kserve.payload import Tensor
from tritonwatch.probe.canary.clients import grpc_infer_answer, http_infer_answer
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.engine_wires import GrpcAnswer
from tritonwatch.probe.canary.inference_client import InferenceClient
from tritonwatch.wire.limits import DEFAULT_LIMITS, AnswerLimits

ONE_SEND_GAP = 3600.0
"""The gap after the one send: no second request goes out while the test waits."""


class _OneSend:
    """The engine's canary for one request: it allows the first send, and hands the
    raw answer (or the exception) to the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._sent = False
        self.answer: asyncio.Future[Any] = loop.create_future()

    def next_gap(self) -> float:
        return ONE_SEND_GAP

    def may_send(self, intended: float) -> bool:
        allowed, self._sent = not self._sent, True
        return allowed

    def record(self, intended: float, answer: Any, woke: float | None = None) -> None:
        self._loop.call_soon_threadsafe(self._settle, answer)

    def _settle(self, answer: Any) -> None:
        if not self.answer.done():
            self.answer.set_result(answer)


async def engine_answer(
    client: InferenceClient,
    model: str,
    version: str,
    tensors: Sequence[Tensor],
    *,
    binary: bool = True,
    timeout: float = 10.0,
    limits: AnswerLimits = DEFAULT_LIMITS,
) -> Any:
    """The raw answer (an HTTP ``(status, headers, body, received)`` tuple, a
    ``GrpcAnswer``) or the exception that ended one infer of ``tensors``, sent by a
    :class:`CanaryEngine` of its own as the canary sends it."""
    encoded = client.infer_request(model, version, tensors, binary=binary)
    request = client.wire_request(encoded, timeout=timeout, limits=limits)
    assert request is not None, "the engine cannot send this request (the library path does)"
    host, port, tls = client.engine_endpoint
    engine = CanaryEngine()
    one = _OneSend(asyncio.get_running_loop())
    serving = asyncio.ensure_future(
        engine.serve(
            one,
            host,
            port,
            request,
            timeout=timeout,
            max_in_flight=1,
            first_send=time.monotonic(),
            tls=tls,
        )
    )
    try:
        async with asyncio.timeout(timeout + 10.0):  # a guard: the engine times out first
            return await one.answer
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
        await asyncio.to_thread(engine.stop)


def decoded(answer: Any) -> Any:
    """The engine's raw ``answer`` decoded as the canary's sender decodes it (an answer
    already decoded, the library path's, as it is); raises what the request failed
    with (an exception handed over, a status, a body that does not decode)."""
    if isinstance(answer, BaseException):
        raise answer
    if isinstance(answer, GrpcAnswer):
        return grpc_infer_answer(answer.reply, answer.received)
    if isinstance(answer, tuple):
        status, headers, body, received = answer
        return http_infer_answer(status, headers, body, received)
    return answer


async def engine_infer(
    client: InferenceClient,
    model: str,
    version: str,
    tensors: Sequence[Tensor],
    *,
    binary: bool = True,
    timeout: float = 10.0,
    limits: AnswerLimits = DEFAULT_LIMITS,
) -> Any:
    """One infer from the engine, decoded (:func:`engine_answer`, :func:`decoded`)."""
    answer = await engine_answer(
        client, model, version, tensors, binary=binary, timeout=timeout, limits=limits
    )
    return decoded(answer)


async def library_infer(
    client: InferenceClient,
    model: str,
    version: str,
    tensors: Sequence[Tensor],
    *,
    binary: bool = True,
    timeout: float = 10.0,
    limits: AnswerLimits = DEFAULT_LIMITS,
) -> Any:
    """The same request through the client's library path (in a worker thread: the
    libraries block); raises what it failed with."""
    call = client.library_call(client.infer_request(model, version, tensors, binary=binary), limits)
    return await asyncio.to_thread(call, timeout)
