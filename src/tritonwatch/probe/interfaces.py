"""The interfaces of the probe layer: what each of its parts asks of another.

The readiness probe is written against these
:class:`~typing.Protocol` classes, not against the classes that implement them, so a
protocol (HTTP or gRPC) or a test's stand-in is a constructor argument. The types their
signatures name are imported for type checking only: importing this module loads none
of them. A seam
inside one folder is declared there (the canary's client in
:mod:`~tritonwatch.probe.canary.inference_client`, the engine's canary in
:mod:`~tritonwatch.probe.canary.engine_wires`, a sweep's worker in
:mod:`~tritonwatch.sweep.worker`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tritonwatch.records.observations import ReadinessObservation


class ReadinessProbe(Protocol):
    """Checks one target; ``close`` releases its connections."""

    def check(self) -> ReadinessObservation: ...

    def close(self) -> None: ...
