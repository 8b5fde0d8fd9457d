"""Fault injection: what can go wrong with a Triton server, on demand.

Each fault is a small frozen spec (validated from the admin endpoint's JSON the same way
as from Python), optionally limited to one model and to ``duration_s`` seconds; expired
faults drop out by themselves. A restart is not a lasting fault but an action, handled
by the owner (``Simulator.restart``).
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class _FaultBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    duration_s: float | None = Field(default=None, gt=0)
    """Lifts the fault by itself after this many seconds; None = until cleared."""


class LatencySpike(_FaultBase):
    """Multiplies the GPU work of every execution (of ``model``, or all) by ``factor``."""

    kind: Literal["latency_spike"] = "latency_spike"
    factor: float = Field(default=5.0, gt=0)
    model: str | None = None


class ErrorBurst(_FaultBase):
    """Fails ``fraction`` of requests with ``reason`` (counted under that failure label).

    REJECTED, CANCELED and OTHER fail on arrival; BACKEND fails after the execution, as
    a backend error does.
    """

    kind: Literal["error_burst"] = "error_burst"
    reason: Literal["REJECTED", "CANCELED", "BACKEND", "OTHER"] = "BACKEND"
    fraction: float = Field(default=1.0, gt=0, le=1)
    model: str | None = None


class Hang(_FaultBase):
    """Accepts requests and never answers: executions stall (``inference``) or every
    non-admin HTTP/gRPC request stalls (``server``), until cleared or expired."""

    kind: Literal["hang"] = "hang"
    scope: Literal["inference", "server"] = "inference"
    model: str | None = None


class MalformedMetrics(_FaultBase):
    """``/metrics`` answers with text a Prometheus parser rejects."""

    kind: Literal["malformed_metrics"] = "malformed_metrics"


class SlowMetrics(_FaultBase):
    """``/metrics`` answers only after ``delay_s`` seconds."""

    kind: Literal["slow_metrics"] = "slow_metrics"
    delay_s: float = Field(default=3.0, ge=0)


Fault = Annotated[
    LatencySpike | ErrorBurst | Hang | MalformedMetrics | SlowMetrics,
    Field(discriminator="kind"),
]
FAULT_ADAPTER: TypeAdapter[Fault] = TypeAdapter(Fault)
FAULT_KINDS = ("latency_spike", "error_burst", "hang", "malformed_metrics", "slow_metrics")


def parse_fault(data: object) -> Fault:
    """Validates a fault from JSON-like data (raises pydantic's ValidationError)."""
    return FAULT_ADAPTER.validate_python(data)


@dataclass(frozen=True)
class ActiveFault:
    """A fault with its id and the loop time at which it lapses."""

    fault_id: int
    fault: Fault
    expires_at: float | None

    def applies_to(self, model: str | None) -> bool:
        target = getattr(self.fault, "model", None)
        return target is None or target == model


class FaultBook:
    """The faults in force; every query takes the current loop time."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._ids = itertools.count(1)
        self._faults: list[ActiveFault] = []
        self._released = asyncio.Event()

    def add(self, fault: Fault, now: float) -> int:
        """Puts ``fault`` in force; returns its id."""
        expires = None if fault.duration_s is None else now + fault.duration_s
        entry = ActiveFault(next(self._ids), fault, expires)
        self._faults.append(entry)
        return entry.fault_id

    def clear(self) -> None:
        """Lifts every fault and releases whatever a hang holds."""
        self._faults.clear()
        self._released.set()
        self._released = asyncio.Event()

    def active(self, now: float) -> list[ActiveFault]:
        """Faults still in force at ``now`` (expired ones are dropped)."""
        self._faults = [f for f in self._faults if f.expires_at is None or f.expires_at > now]
        return list(self._faults)

    def describe(self, now: float) -> list[dict[str, Any]]:
        """JSON view for ``GET /sim/state``."""
        return [
            {
                "id": entry.fault_id,
                **entry.fault.model_dump(),
                "remaining_s": None if entry.expires_at is None else entry.expires_at - now,
            }
            for entry in self.active(now)
        ]

    def latency_factor(self, model: str, now: float) -> float:
        """Product of the latency spikes on ``model``."""
        if not self._faults:
            return 1.0
        factor = 1.0
        for entry in self.active(now):
            if isinstance(entry.fault, LatencySpike) and entry.applies_to(model):
                factor *= entry.fault.factor
        return factor

    def failure_reason(self, model: str, now: float) -> str | None:
        """The failure this request draws from the error bursts, if any."""
        if not self._faults:
            return None
        for entry in self.active(now):
            fault = entry.fault
            if (
                isinstance(fault, ErrorBurst)
                and entry.applies_to(model)
                and (fault.fraction >= 1.0 or self._rng.random() < fault.fraction)
            ):
                return fault.reason
        return None

    def _hang(self, model: str | None, scope: str, now: float) -> ActiveFault | None:
        for entry in self.active(now):
            fault = entry.fault
            if isinstance(fault, Hang) and fault.scope == scope and entry.applies_to(model):
                return entry
        return None

    async def wait_while_hung(
        self, loop: asyncio.AbstractEventLoop, scope: str, model: str | None = None
    ) -> None:
        """Returns at once unless a hang holds; then waits until it is cleared or lapses."""
        if not self._faults:
            return
        while (entry := self._hang(model, scope, loop.time())) is not None:
            released = self._released
            timeout = None if entry.expires_at is None else entry.expires_at - loop.time()
            try:
                await asyncio.wait_for(released.wait(), timeout)
            except TimeoutError:
                continue

    def metrics_delay(self, now: float) -> float:
        """Seconds ``/metrics`` should stall before answering."""
        delays = [
            entry.fault.delay_s
            for entry in self.active(now)
            if isinstance(entry.fault, SlowMetrics)
        ]
        return max(delays, default=0.0)

    def metrics_malformed(self, now: float) -> bool:
        """Whether ``/metrics`` should answer with broken text."""
        return any(isinstance(entry.fault, MalformedMetrics) for entry in self.active(now))
