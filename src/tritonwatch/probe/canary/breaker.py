"""A model canary's circuit breaker: a server that keeps failing gets probes, not load.

After :data:`BREAKER_FAILURES` consecutive failures without an answer (connection
errors, timeouts), the canary stops adding load to a server that is down or drowning and
sends one probe per :data:`BREAKER_PROBE_SECONDS`; the first answer closes it again.
An answer of any kind (a success, a bad response, a refused size, our own reader's
fault, a refused request) shows the server is there: it closes the breaker and never
trips it.
"""

from __future__ import annotations

from enum import Enum

from tritonwatch.records.observations import Outcome

BREAKER_FAILURES = 5
"""Consecutive failures after which a model's canary stops adding load…"""
BREAKER_PROBE_SECONDS = 10.0
"""…and sends one gentle probe this often until the server answers again."""


class BreakerChange(Enum):
    """What one recorded outcome did to the breaker (the canary logs and shows it)."""

    OPENED = "opened"
    CLOSED = "closed"


class CircuitBreaker:
    """Counts consecutive failures and holds the load back while open.

    No lock: one thread touches it, the canary's sending thread, which records the
    outcomes other threads saw when it next asks (probe/canary/send_gates.py). Other
    threads read :attr:`is_open` only."""

    def __init__(self) -> None:
        self.failures = 0
        self._open_until: float | None = None
        """While set, only one probe is sent per :data:`BREAKER_PROBE_SECONDS`."""

    @property
    def is_open(self) -> bool:
        return self._open_until is not None

    def allows(self, now: float) -> bool:
        """Closed: every send. Open: one probe per :data:`BREAKER_PROBE_SECONDS`."""
        if self._open_until is None:
            return True
        if now >= self._open_until:
            self._open_until = now + BREAKER_PROBE_SECONDS
            return True
        return False

    def record(self, outcome: Outcome, now: float) -> BreakerChange | None:
        """Takes one request's outcome; says when it opened or closed the breaker."""
        if outcome in _ANSWERED:
            was_open = self._open_until is not None
            self.failures, self._open_until = 0, None
            return BreakerChange.CLOSED if was_open else None
        self.failures += 1
        if self.failures >= BREAKER_FAILURES and self._open_until is None:
            self._open_until = now + BREAKER_PROBE_SECONDS
            return BreakerChange.OPENED
        return None


_ANSWERED = frozenset(
    {
        Outcome.SUCCESS,
        Outcome.BAD_RESPONSE,
        Outcome.CLIENT_ERROR,
        Outcome.TOO_LARGE,
        Outcome.REJECTED,
    }
)
"""Outcomes of a server that answered: they close the breaker, never trip it (a model
that refuses the canary's input has a back-off of its own: probe/canary/refusals.py)."""
