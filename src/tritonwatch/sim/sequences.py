"""Stateful models: correlation ids, Triton's sequence checks, slots and idle release.

A request to a model with ``sequence_batching`` carries a correlation id and the START
and END flags (HTTP: the request's ``parameters`` ``sequence_id``/``sequence_start``/
``sequence_end``; gRPC: the same keys in ``ModelInferRequest.parameters``). Triton's
sequence batcher refuses, before anything is counted and in this order:

* a batch other than 1: ``inference request to model '<m>' must specify batch-size 1
  due to requirements of sequence batcher``;
* no id (0 or ""): ``inference request to model '<m>' must specify a non-zero or
  non-empty correlation ID``;
* a request of a sequence that is not open without START: ``inference request for
  sequence <id> to model '<m>' must specify the START flag on the first request of the
  sequence``.

(texts and order as real tritonserver 2.51 answers, all INVALID_ARG: HTTP 400, gRPC
INVALID_ARGUMENT). A sequence holds one batch slot (``max_batch_size`` per instance,
at least one) from START until END or until it has been idle longer than
``max_sequence_idle_microseconds``; a START finding no free slot waits, which shows as
queue time. A sequence's requests run one at a time, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from tritonwatch.sim.errors import ErrorCode, SimError
from tritonwatch.sim.models import ModelSpec

SequenceId = int | str


@dataclass(frozen=True, slots=True)
class SequenceFlags:
    """A request's correlation id (0 or "" for none) and its START/END flags."""

    id: SequenceId = 0
    start: bool = False
    end: bool = False

    @property
    def given(self) -> bool:
        """Whether the request named a correlation id at all."""
        return self.id not in (0, "")


NO_SEQUENCE = SequenceFlags()


@dataclass(eq=False)
class _Sequence:
    last_seen: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _refused(message: str) -> SimError:
    return SimError(ErrorCode.INVALID_ARG, message)


def not_started(sequence: SequenceId, model: str) -> SimError:
    """Triton's refusal of a request of a sequence that is not open, without START."""
    return _refused(
        f"inference request for sequence {sequence} to model '{model}' must specify the "
        "START flag on the first request of the sequence"
    )


class SequenceBook:
    """The open sequences of one loaded stateful model, and its slots."""

    def __init__(self, spec: ModelSpec, clock: Callable[[], float], instances: int) -> None:
        assert spec.sequence_batching is not None
        batching = spec.sequence_batching
        self._model = spec.name
        self._clock = clock
        self._idle_s = batching.max_sequence_idle_microseconds / 1e6
        self._spec = spec
        self._open: dict[SequenceId, _Sequence] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self.waiting = 0
        """Sequences waiting for a free slot (pending, as Triton's backlog is)."""
        self.slots = 0
        self.resize(instances)

    def resize(self, instances: int) -> None:
        """Sets the slots for ``instances`` instances (a count-only config change)."""
        batching = self._spec.sequence_batching
        assert batching is not None
        slots = max(1, self._spec.max_batch_size) * max(1, instances)
        if batching.oldest is not None and batching.oldest.max_candidate_sequences > 0:
            slots = batching.oldest.max_candidate_sequences
        self.slots = slots
        self._wake()

    @property
    def open_sequences(self) -> int:
        """Sequences holding a slot now (idle ones included until released)."""
        return len(self._open)

    def check(self, flags: SequenceFlags, batch_size: int) -> None:
        """Triton's checks of a request, in Triton's order (see the module docstring).

        Raises:
            SimError: INVALID_ARG with Triton's text.
        """
        if batch_size != 1:
            raise _refused(
                f"inference request to model '{self._model}' must specify batch-size 1 due "
                "to requirements of sequence batcher"
            )
        if not flags.given:
            raise _refused(
                f"inference request to model '{self._model}' must specify a non-zero or "
                "non-empty correlation ID"
            )
        self._release_idle()
        if not flags.start and flags.id not in self._open:
            raise not_started(flags.id, self._model)

    def _release_idle(self) -> None:
        now = self._clock()
        expired = [
            key
            for key, sequence in self._open.items()
            if not sequence.lock.locked() and now - sequence.last_seen > self._idle_s
        ]
        for key in expired:
            del self._open[key]
        if expired:
            self._wake()

    def _wake(self) -> None:
        """Wakes every START waiting for a slot (each checks again)."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def _take_slot(self, key: SequenceId) -> _Sequence:
        self.waiting += 1
        try:
            while True:
                self._release_idle()
                if key in self._open:  # another START of the same id got a slot first
                    return self._open[key]
                if len(self._open) < self.slots:
                    sequence = self._open[key] = _Sequence(self._clock())
                    return sequence
                waiter = asyncio.get_running_loop().create_future()
                self._waiters.append(waiter)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter, self._next_expiry())
        finally:
            self.waiting -= 1

    def _next_expiry(self) -> float | None:
        idle = [s.last_seen for s in self._open.values() if not s.lock.locked()]
        if not idle:
            return None
        return max(0.0, min(idle) + self._idle_s - self._clock()) + 1e-6

    @contextlib.asynccontextmanager
    async def hold(self, flags: SequenceFlags) -> AsyncIterator[None]:
        """Runs a checked request inside its sequence: a START takes (or waits for) a
        slot, the sequence's requests run one at a time, an END frees the slot (whether
        its request succeeded or not).

        Raises:
            SimError: the sequence was released (idle) between the check and now.
        """
        sequence = self._open.get(flags.id)
        if sequence is None:
            if not flags.start:
                raise not_started(flags.id, self._model)
            sequence = await self._take_slot(flags.id)
        try:
            async with sequence.lock:
                sequence.last_seen = self._clock()
                try:
                    yield
                finally:
                    sequence.last_seen = self._clock()
        finally:  # an END ends the sequence even when its request failed
            if flags.end and self._open.get(flags.id) is sequence:
                del self._open[flags.id]
                self._wake()
