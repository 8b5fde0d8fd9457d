"""What the canary tests against real Triton share: a client that keeps each exchange,
and the plan of one model's canary against the session's server."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from real_triton import RealTriton
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.payload import Tensor


class RecordingClient:
    """The canary's real client, keeping what each call sent and got (the ``batching``
    and ``flaky`` models echo their input, so the two must be equal) and whether it
    sent binary tensors."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.protocol = inner.protocol
        self.exchanges: list[tuple[list[Tensor], Any]] = []
        self.binary: list[bool] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def infer(
        self, model: str, version: str, tensors: Sequence[Tensor], *, binary: bool, timeout: float
    ) -> Any:
        self.binary.append(binary)
        result = await self._inner.infer(model, version, tensors, binary=binary, timeout=timeout)
        self.exchanges.append((list(tensors), result))
        return result


def canary_plan(server: RealTriton, model: str, protocol: str, **changes: Any) -> CanaryPlan:
    """A steady (not Poisson) canary of ``model`` at 25 requests/s, one in flight, 2 s
    timeout, random data; ``changes`` override any field."""
    fields: dict[str, Any] = {
        "target": "triton",
        "model": model,
        "version": "",
        "protocol": protocol,
        "http_url": server.http_url,
        "grpc_url": server.grpc_url,
        "rate": 25.0,
        "poisson": False,
        "timeout": 2.0,
        "max_in_flight": 1,
        "data": "random",
    }
    fields.update(changes)
    return CanaryPlan(**fields)
