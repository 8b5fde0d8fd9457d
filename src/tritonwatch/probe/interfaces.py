"""The interfaces of the probe layer: what each of its parts asks of another.

The canary, the sweep and the readiness probe are written against these
:class:`~typing.Protocol` classes, not against the classes that implement them, so a
protocol (HTTP or gRPC), a worker's process or a test's stand-in is a constructor
argument. They live together so the layer's seams can be read in one place; the record
types their signatures name are imported for type checking only: importing this module
loads none of them and makes no cycle with the modules that implement it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tritonwatch.observations import ReadinessObservation
    from tritonwatch.probe.canary_engine import RawAnswer
    from tritonwatch.probe.load.worker import WindowSamples
    from tritonwatch.probe.payload import Tensor


class InferenceClient(Protocol):
    """One asyncio face over KServe v2 HTTP and gRPC, so the canary and the sweep take
    the protocol as a constructor argument (:func:`~tritonwatch.probe.clients.client_for`)."""

    protocol: str

    async def extensions(self) -> frozenset[str]: ...

    async def metadata(self, model: str, version: str) -> dict[str, Any]: ...

    async def config(self, model: str, version: str) -> dict[str, Any] | None: ...

    async def infer(
        self, model: str, version: str, tensors: Sequence[Tensor], *, binary: bool, timeout: float
    ) -> Any: ...

    async def close(self) -> None: ...


class EngineCanary(Protocol):
    """What the engine asks of the canary it sends for
    (:class:`~tritonwatch.probe.canary.ModelCanary` is one)."""

    def next_gap(self) -> float:
        """Seconds from one intended send to the next."""
        ...

    def may_send(self, intended: float) -> bool:
        """Whether to send at ``intended`` (False: paused, or the breaker is open)."""
        ...

    def answered(self, intended: float, answer: RawAnswer | BaseException, woke: float) -> None:
        """Judges and records one request's answer or failure (on the engine's thread);
        ``woke`` is when the engine took the request up, at or after ``intended``."""
        ...


class ServerErrorLike(Protocol):
    """What the canary reads from either error class."""

    def message(self) -> str | None: ...

    def status(self) -> str | None: ...


class ReadinessProbe(Protocol):
    """Checks one target; ``close`` releases its connections."""

    def check(self) -> ReadinessObservation: ...

    def close(self) -> None: ...


class Worker(Protocol):
    """A sweep's load worker, in this process or a child (:mod:`~tritonwatch.probe.load.pool`)."""

    def cut(self) -> WindowSamples: ...

    def stop(self) -> None: ...
