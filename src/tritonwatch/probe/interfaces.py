"""The interfaces of the probe layer: what each of its parts asks of another.

The canary, the sweep and the readiness probe are written against these
:class:`~typing.Protocol` classes, not against the classes that implement them, so a
protocol (HTTP or gRPC) or a test's stand-in is a constructor argument. The types their
signatures name are imported for type checking only, and none is the probe's own but
the payload: importing this module loads none of them and closes no circle. A seam
inside one folder is declared there (the engine's canary in
:mod:`~tritonwatch.probe.canary.engine_wires`, a sweep's worker in
:mod:`~tritonwatch.probe.sweep.worker`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tritonwatch.probe.payload import Tensor
    from tritonwatch.records.observations import ReadinessObservation


class InferenceClient(Protocol):
    """One asyncio face over KServe v2 HTTP and gRPC, so the canary and the sweep take
    the protocol as a constructor argument
    (:func:`~tritonwatch.probe.canary.clients.client_for`)."""

    protocol: str

    async def extensions(self) -> frozenset[str]: ...

    async def metadata(self, model: str, version: str) -> dict[str, Any]: ...

    async def config(self, model: str, version: str) -> dict[str, Any] | None: ...

    async def infer(
        self, model: str, version: str, tensors: Sequence[Tensor], *, binary: bool, timeout: float
    ) -> Any: ...

    async def close(self) -> None: ...


class ServerErrorLike(Protocol):
    """What the canary reads from either error class."""

    def message(self) -> str | None: ...

    def status(self) -> str | None: ...


class ReadinessProbe(Protocol):
    """Checks one target; ``close`` releases its connections."""

    def check(self) -> ReadinessObservation: ...

    def close(self) -> None: ...
