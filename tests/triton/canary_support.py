"""What the canary tests against real Triton share: a client that keeps what it encoded,
a canary that keeps what it judged, and the plan of one model's canary against the
session's server.

The canary's requests leave from its engine as the bytes its client encoded once
(``infer_request``), or through the library path: :class:`RecordingClient` keeps the
tensors and form of each request it encoded, and can hold the canary off the engine
(``engine=False``: the library path sends every request). :class:`RecordingCanary`
keeps each answer decoded as its sender decodes it (the engine hands raw answers), so
a test compares what came back with what was sent (the ``batching`` and ``flaky``
models echo their input).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from engine_infer_support import decoded
from real_triton import RealTriton
from tritonwatch.kserve.payload import Tensor
from tritonwatch.probe.canary.model_canary import ModelCanary
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.wire.http2 import UnaryRequest
from tritonwatch.wire.kserve_protobuf import Scalar
from tritonwatch.wire.limits import AnswerLimits, HttpRequest


class RecordingClient:
    """The canary's real client, keeping the tensors and form of every request it
    encoded; ``engine=False``: the engine can send none of them, so the canary sends
    every request through the library path (probe/canary/library_path.py)."""

    def __init__(self, inner: Any, *, engine: bool = True) -> None:
        self._inner = inner
        self._engine = engine
        self.protocol = inner.protocol
        self.encoded: list[tuple[list[Tensor], bool]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def infer_request(
        self, model: str, version: str, tensors: Sequence[Tensor], *, binary: bool
    ) -> bytes:
        self.encoded.append((list(tensors), binary))
        request: bytes = self._inner.infer_request(model, version, tensors, binary=binary)
        return request

    def encode_infer(
        self,
        model: str,
        version: str,
        tensors: Sequence[Tensor],
        *,
        binary: bool,
        parameters: Mapping[str, Scalar] | None = None,
    ) -> bytes:
        self.encoded.append((list(tensors), binary))
        request: bytes = self._inner.encode_infer(
            model, version, tensors, binary=binary, parameters=parameters
        )
        return request

    def wire_request(
        self, encoded: bytes, *, timeout: float, limits: AnswerLimits
    ) -> HttpRequest | UnaryRequest | None:
        if not self._engine:
            return None
        request: HttpRequest | UnaryRequest | None = self._inner.wire_request(
            encoded, timeout=timeout, limits=limits
        )
        return request


def decoded_or_error(answer: Any) -> Any:
    """An answer as the canary judges it: the engine's raw answer decoded (or the error
    its status or body ends in), the library's decoded result, or the exception."""
    try:
        return decoded(answer)
    except Exception as error:
        return error


class RecordingCanary(ModelCanary):
    """The daemon's canary, keeping each send time it allowed and each answer it judged
    (decoded), whichever path sent them (the engine calls both from its own thread)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.allowed: list[float] = []
        self.judged: list[tuple[float, Any]] = []
        self.woke: list[float] = []
        """When the sending thread took each judged request up (its latency starts there)."""
        self.recorded_at: list[float] = []
        """When each judged request's end reached the canary (monotonic time)."""

    def may_send(self, intended: float) -> bool:
        allowed = super().may_send(intended)
        if allowed:
            self.allowed.append(intended)
        return allowed

    def record(self, intended: float, answer: Any, woke: float | None = None) -> None:
        self.recorded_at.append(time.monotonic())
        self.judged.append((intended, decoded_or_error(answer)))
        self.woke.append(intended if woke is None else max(intended, woke))
        super().record(intended, answer, woke)

    def exchanges(self) -> list[tuple[list[Tensor], Any]]:
        """Each answer that decoded, with the tensors of its request: a plain model's
        requests are all the one its client (a :class:`RecordingClient`) encoded last."""
        answers = [a for _, a in self.judged if not isinstance(a, BaseException)]
        if not answers:
            return []
        client = self._client
        assert isinstance(client, RecordingClient), "made with a RecordingClient"
        tensors = client.encoded[-1][0]
        return [(tensors, answer) for answer in answers]


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
