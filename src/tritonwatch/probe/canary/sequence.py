"""The sequence canary: a stateful model's requests as sequences, planned for Triton's idle timer.

A model with ``sequence_batching`` in its config refuses a request without a
correlation id, and a first request without START (docs/design.md §4b). Its canary
sends sequences as perf_analyzer drives one: correlation ids from
``canary.sequence`` (cycling through ``id_count`` ids from ``id_start``, beginning at a
random one of them; a model whose CORRID control input is ``TYPE_STRING`` gets
``"tritonwatch-<id>"``), START on the first request of each, END on the last
(``sequence.length`` requests, 20 by default), batch 1. The flags travel as the
request's ``sequence_id``/``sequence_start``/``sequence_end`` parameters (HTTP JSON and
gRPC alike); the control inputs are Triton's to fill, so they are never sent as
tensors (:func:`control_inputs`). ``direct`` and ``oldest`` batchers take the same
flags. An ``iterative_sequence`` batcher tracks sequences itself: a request without
an id gets one and START from Triton, and its sequence ends with the request (Triton
2.51 refuses a second request of a sequence the client named, for want of START), so
that model's canary sends plain requests, each a sequence of its own, and no planner
(request_source.py).

The plan. Triton releases a sequence that sends nothing for
``max_sequence_idle_microseconds`` (1 s by default), and a request after that, without
START, is refused. So:

* within a sequence, requests go ``min(1 / rate, max_idle / 2)`` apart: never more than
  half the idle time, whatever the rate;
* the gap after a sequence's END is stretched to
  ``length / rate - (length - 1) * within`` so that the average rate stays
  ``canary.rate`` (at the default 1/s, 20 requests and a 1 s idle time: 19 gaps of
  0.5 s, then 10.5 s);
* with ``distribution: poisson`` only that gap is drawn (exponential, same mean); the
  gaps inside a sequence stay fixed, so none passes half the idle time;
* a request that fails or times out ends its sequence for the canary: the next one
  starts a new sequence, with a new id and START (Triton releases the old one when
  it idles out). So does a request planned more than :data:`STALE_FRACTION` of the
  idle time after the one before (the canary was paused, its breaker held it back);
* a request sent with no plan for it (none left, or the library path's: a second
  opinion, or every request once the canary left its own readers) is a sequence of its
  own: START and END together;
* requests of a sequence go one after another on the schedule, not one after the
  other's answer (the canary is open-loop): one that overtakes its sequence's START
  (a slow first connection) is refused, ``rejected``, never the server's failure.

Both sending paths ask in the same order for each send time: :meth:`SequencePlanner.gap`
(the gap after it, a pure look ahead), then :meth:`~SequencePlanner.plan` when the send
is allowed, :meth:`~SequencePlanner.take` when its request is made, and
:meth:`~SequencePlanner.finished` with its outcome. The engine's thread and the event
loop's both call it: one lock guards it.
"""

from __future__ import annotations

import os
import random
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tritonwatch.wire.kserve_protobuf import Scalar

STALE_FRACTION = 0.75
"""A sequence whose last request was planned more than this share of the idle time
before the next is given up: Triton may have released it."""
STRING_ID_PREFIX = "tritonwatch-"


def control_inputs(config: Mapping[str, Any] | None) -> frozenset[str]:
    """The inputs Triton fills for a stateful model (its control inputs and implicit
    state), which a request must not send."""
    batching = (config or {}).get("sequence_batching")
    if not isinstance(batching, Mapping):
        return frozenset()
    names = {
        entry.get("name")
        for entry in batching.get("control_input") or []
        if isinstance(entry, Mapping)
    }
    names |= {
        entry.get("input_name")
        for entry in batching.get("state") or []
        if isinstance(entry, Mapping)
    }
    return frozenset(name for name in names if isinstance(name, str) and name)


def string_correlation_id(config: Mapping[str, Any] | None) -> bool:
    """Whether the model's CORRID control input is ``TYPE_STRING`` (ids are then strings)."""
    batching = (config or {}).get("sequence_batching")
    for entry in batching.get("control_input") or [] if isinstance(batching, Mapping) else []:
        for control in entry.get("control") or [] if isinstance(entry, Mapping) else []:
            if (
                isinstance(control, Mapping)
                and control.get("kind") == "CONTROL_SEQUENCE_CORRID"
                and control.get("data_type") == "TYPE_STRING"
            ):
                return True
    return False


@dataclass(frozen=True, slots=True)
class SequenceFlags:
    """One request's place in its sequence."""

    sequence_id: int | str
    start: bool
    end: bool

    def parameters(self) -> dict[str, Scalar]:
        """The request parameters that carry it (``tritonclient`` sends the same three)."""
        return {
            "sequence_id": self.sequence_id,
            "sequence_start": self.start,
            "sequence_end": self.end,
        }


@dataclass(eq=False, slots=True)
class _Sequence:
    number: int
    planned: int = 0
    last: float = 0.0
    """The intended send time of its latest planned request."""


class SequencePlanner:
    """Plans one model's sequences: the gaps of its schedule and each request's flags."""

    def __init__(
        self,
        *,
        rate: float,
        length: int,
        max_idle_seconds: float,
        id_start: int,
        id_count: int,
        string_ids: bool = False,
        poisson: random.Random | None = None,
        first: int | None = None,
    ) -> None:
        """``poisson``: the generator that draws the gaps after END (None: fixed gaps);
        ``first``: which id of the range the first sequence takes (None: a random one,
        so a restarted daemon, or a second one watching the same server, does not
        reuse a sequence still open on the server)."""
        self.length = length
        self.within_gap = min(1.0 / rate, max_idle_seconds / 2)
        self.end_gap = length / rate - (length - 1) * self.within_gap
        self._stale_after = STALE_FRACTION * max_idle_seconds
        self._id_start, self._id_count, self._string_ids = id_start, id_count, string_ids
        self._poisson = poisson
        self._lock = threading.Lock()
        self._open: _Sequence | None = None
        self._begun = int.from_bytes(os.urandom(8), "little") % id_count if first is None else first
        self._queue: deque[tuple[float, SequenceFlags, _Sequence]] = deque()
        """Planned requests not made yet: (intended, flags, sequence), in send order."""
        self._sent: dict[float, _Sequence] = {}
        """Requests made and not finished: their sequence by intended send time."""

    def sequence_id(self, number: int) -> int | str:
        """The correlation id of the ``number``-th sequence (cycling through the range)."""
        value = self._id_start + number % self._id_count
        return f"{STRING_ID_PREFIX}{value}" if self._string_ids else value

    @property
    def longest_id(self) -> int | str:
        """The id whose parameters take the most bytes (to size a request)."""
        return self.sequence_id(self._id_count - 1)

    def gap(self) -> float:
        """The gap after the next send time: the stretched one when that send would be
        its sequence's last. Changes nothing (the send may not be allowed)."""
        with self._lock:
            position = 0 if self._open is None else self._open.planned
        if position < self.length - 1:
            return self.within_gap
        if self._poisson is not None:
            return self._poisson.expovariate(1.0 / self.end_gap)
        return self.end_gap

    def plan(self, intended: float) -> None:
        """The send at ``intended`` is allowed: its flags are fixed now, in send order."""
        with self._lock:
            sequence = self._open
            if sequence is None or intended - sequence.last > self._stale_after:
                sequence = self._open = self._begin()
            flags = SequenceFlags(
                self.sequence_id(sequence.number),
                start=sequence.planned == 0,
                end=sequence.planned == self.length - 1,
            )
            sequence.planned += 1
            sequence.last = intended
            if flags.end:
                self._open = None
            self._queue.append((intended, flags, sequence))

    def take(self, intended: float | None = None) -> SequenceFlags:
        """The flags of the request being made: the one planned for ``intended`` (None:
        the oldest planned, as the engine makes them in order); a sequence of its own
        when none is planned."""
        with self._lock:
            found = None
            if intended is None and self._queue:
                found = self._queue.popleft()
            elif intended is not None:
                found = next((entry for entry in self._queue if entry[0] == intended), None)
                if found is not None:
                    self._queue.remove(found)
            if found is None:
                return self._lone()
            at, flags, sequence = found
            self._sent[at] = sequence
            return flags

    def finished(self, intended: float, *, ok: bool) -> None:
        """The request planned for ``intended`` ended (``ok``: it succeeded); a failure,
        sent or not, ends its sequence for the canary (the next request starts one)."""
        with self._lock:
            sequence = self._sent.pop(intended, None)
            if sequence is None:
                found = next((entry for entry in self._queue if entry[0] == intended), None)
                if found is not None:
                    self._queue.remove(found)
                    sequence = found[2]
            if not ok and sequence is not None and sequence is self._open:
                self._open = None

    def lone(self) -> SequenceFlags:
        """A request that is a sequence of its own: a new id, START and END."""
        with self._lock:
            return self._lone()

    def _lone(self) -> SequenceFlags:
        return SequenceFlags(self.sequence_id(self._begin().number), start=True, end=True)

    def _begin(self) -> _Sequence:
        sequence = _Sequence(self._begun)
        self._begun += 1
        return sequence
