"""Whether a canary sends now, and the outcomes that decide it, kept by one thread.

Three gates stand before each send: the model's pause (the runner's,
:mod:`~tritonwatch.probe.canary.pauses`), the circuit breaker
(:mod:`~tritonwatch.probe.canary.breaker`) and the refusal watch
(:mod:`~tritonwatch.probe.canary.refusals`). The last two change with each outcome, and
the send decision itself writes their next probe time. The decision runs on the thread
that sends (:mod:`~tritonwatch.probe.canary.engine`: the engine's thread, or the event
loop's on the library path), but not every outcome is recorded there: a second opinion
(:mod:`~tritonwatch.probe.canary.library_path`) ends on the event loop while the engine
sends, and a canary that left the engine for the library path may still hear a late
answer from the engine. A probe decided on one thread and an answer recorded
on the other could lose an update: a breaker reopened just after an answer closed it.

So the breaker's and the refusal watch's state have one owner, the sending thread, and
no lock: :meth:`SendGates.allows` is asked by the owner alone; :meth:`SendGates.record`
applies an outcome at once on the owner and queues it from any other thread for the
owner's next :meth:`~SendGates.allows`, which applies what waits before it decides
(the engine asks at every scheduled send, paused or held back or not, so nothing waits
longer than one interval). The owner is the first thread to ask; a canary that leaves
the engine for the loop hands the gates to the loop (:meth:`SendGates.take_over`), and
the engine, should its last turn still ask, is refused.
"""

from __future__ import annotations

import threading
from collections import deque

from tritonwatch.common.logs import get_logger
from tritonwatch.probe.canary import breaker
from tritonwatch.probe.canary.pauses import Pauses
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.canary.refusals import RefusalWatch
from tritonwatch.records.observations import Outcome
from tritonwatch.state.canary_board import CanaryBoard

_log = get_logger("canary")


class SendGates:
    """One model canary's pause, breaker and refusal watch (see the module)."""

    def __init__(self, plan: CanaryPlan, stats: CanaryBoard, pauses: Pauses | None) -> None:
        self._plan = plan
        self._stats = stats
        self._pauses = pauses if pauses is not None else Pauses()
        """Owner: the runner (a canary made without one has its own, never paused)."""
        self.breaker = breaker.CircuitBreaker()
        """Owner: the sending thread. Others read ``is_open`` (liveness, the engine)."""
        self.refusals = RefusalWatch(stats, plan.key)
        """Owner: the sending thread. Others read ``refusing`` (liveness)."""
        self._owner: int | None = None
        """The sending thread's ident: the first to ask, or the one that took over.
        Written by that thread alone (the loop's :meth:`take_over` after the engine's
        serving ended)."""
        self._queued: deque[tuple[Outcome, str, float]] = deque()
        """Outcomes recorded on another thread, for the owner to apply: any thread
        appends, the owner alone pops (each one atomic step)."""

    @property
    def paused(self) -> bool:
        """Whether the model's pause holds its canary back (any thread)."""
        return self._pauses.holds(self._plan.target, self._plan.model)

    def owed_since(self, began: float | None) -> float | None:
        """From when a canary that began sending at ``began`` owes outcomes (pauses.py)."""
        return self._pauses.owed_since(self._plan.target, self._plan.model, began)

    def allows(self, intended: float) -> bool:
        """Whether to send at ``intended``: not paused, not backed off from refusals,
        not held back by the breaker. Asked by the sending thread; the first thread to
        ask becomes it, any other is refused."""
        here = threading.get_ident()
        if self._owner != here:
            if self._owner is not None:
                return False  # the engine's last turn, after the canary left it
            self._owner = here
        while self._queued:
            self._apply(*self._queued.popleft())
        if self.paused:
            return False
        refusals = self.refusals
        if refusals.refusing and not refusals.allows(intended):
            return False
        return self.breaker.allows(intended)

    def take_over(self) -> None:
        """The calling thread sends from now on (the loop, once the canary left the
        engine): what the engine still records waits for it."""
        self._owner = threading.get_ident()

    def record(self, outcome: Outcome, error: str, now: float) -> None:
        """One request's outcome (``error``: the failure's text), at ``now``: applied
        at once on the sending thread (or before any thread asked), else queued for it."""
        owner = self._owner
        if owner is None or owner == threading.get_ident():
            self._apply(outcome, error, now)
        else:
            self._queued.append((outcome, error, now))

    def _apply(self, outcome: Outcome, error: str, now: float) -> None:
        """On the owner: the breaker and the refusal watch take the outcome; the board
        and the log hear when the breaker opens or closes."""
        plan = self._plan
        change = self.breaker.record(outcome, now)
        if change is breaker.BreakerChange.CLOSED:
            _log.info("canary_circuit_closed", target=plan.target, model=plan.model)
            self._stats.set_circuit_open(plan.key, open_=False)
        elif change is breaker.BreakerChange.OPENED:
            self._stats.set_circuit_open(plan.key, open_=True)
            _log.warning(
                "canary_circuit_open",
                target=plan.target,
                model=plan.model,
                failures=self.breaker.failures,
                probe_every_seconds=breaker.BREAKER_PROBE_SECONDS,
            )
        refusals = self.refusals
        if outcome == Outcome.REJECTED or refusals.in_row or refusals.refusing:
            refusals.record(outcome, error, now)
