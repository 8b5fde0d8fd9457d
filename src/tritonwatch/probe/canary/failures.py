"""Log lines for failed canary requests: the reason in full at first, then a count.

A canary that fails quietly burns an SLO with nothing to say why (on real Triton every
HTTP answer once was a ``bad_response`` and no line named the fault). So each model's
first failures are logged whole, with the server's own error text; past those, one
line per period counts the rest and repeats the last reason, so a model failing at
50/s writes one line a minute instead of 3000. A period without failures starts over:
the next failure is logged whole again.

Refused connections are left out: the readiness probe and the circuit breaker already
report a server that is down, and at canary rates they would drown everything else.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tritonwatch.common.logs import get_logger
from tritonwatch.records.observations import Outcome

_log = get_logger("canary")
FULL_LINES = 3
"""Failures of one model logged whole before the rest are only counted."""
PERIOD_SECONDS = 60.0
"""How often the count of the failures not logged whole is written."""


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed canary request, as the log line tells it."""

    outcome: Outcome
    error: str
    status: int | None = None
    """The HTTP status, when the server answered one."""


class FailureLog:
    """The rate-limited failure lines of one model's canary (one per ModelCanary)."""

    def __init__(
        self,
        target: str,
        model: str,
        protocol: str,
        *,
        full_lines: int = FULL_LINES,
        period: float = PERIOD_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fields = {"target": target, "model": model, "protocol": protocol}
        self._full_lines = full_lines
        self._period = period
        self._clock = clock
        self._logged = 0
        self._last_failure_at: float | None = None
        self._suppressed = 0
        self._suppressed_since = 0.0
        self._last: Failure | None = None

    def failed(self, failure: Failure) -> None:
        """One failed request: a whole line, or one more in the period's count."""
        now = self._clock()
        self.tick(now)
        self._last_failure_at = now
        if self._logged < self._full_lines:
            self._logged += 1
            _log.warning("canary_request_failed", **self._fields, **_described(failure))
            return
        if not self._suppressed:
            self._suppressed_since = now
        self._suppressed += 1
        self._last = failure

    def tick(self, now: float | None = None) -> None:
        """Called on every result: writes the count once its period is over, and starts
        over with whole lines after a period without failures."""
        now = self._clock() if now is None else now
        if self._suppressed and now - self._suppressed_since >= self._period:
            self.flush(now)
        if (
            not self._suppressed
            and self._last_failure_at is not None
            and now - self._last_failure_at >= self._period
        ):
            self._logged, self._last_failure_at = 0, None

    def flush(self, now: float | None = None) -> None:
        """Writes the pending count now (the canary stops, or the period is over)."""
        if not self._suppressed or self._last is None:
            return
        now = self._clock() if now is None else now
        last = _described(self._last)
        _log.warning(
            "canary_failures_suppressed",
            **self._fields,
            count=self._suppressed,
            seconds=round(now - self._suppressed_since, 1),
            last_outcome=last["outcome"],
            last_error=last["error"],
            **({"last_status": last["status"]} if "status" in last else {}),
        )
        self._suppressed, self._last = 0, None


def _described(failure: Failure) -> dict[str, object]:
    fields: dict[str, object] = {"outcome": str(failure.outcome), "error": failure.error}
    if failure.status is not None:
        fields["status"] = failure.status
    return fields
