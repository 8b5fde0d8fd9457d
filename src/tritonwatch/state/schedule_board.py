"""Did every scheduled job run on time? The truth behind ``/health``.

A daemon whose HTTP server answers but whose jobs stopped running (a wedged
executor, a deadlocked probe) is not healthy; Kubernetes should restart it. Each
job reports completion here; :meth:`ScheduleBoard.late_jobs` is a pure reading of
those reports against the clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

LATENESS_GRACE_SECONDS = 1.0
MISSED_RUNS_ALLOWED = 2


@dataclass(frozen=True, slots=True)
class LateJob:
    job_id: str
    seconds_since_last_run: float
    interval_seconds: float


@dataclass(slots=True)
class _Expectation:
    interval: float
    reference: float
    """When the job last completed, or its first due time if it never has."""


class ScheduleBoard:
    """Thread-safe record of when each scheduled job last completed."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[str, _Expectation] = {}

    def expect(self, job_id: str, interval: float, first_due: float) -> None:
        """Starts watching ``job_id``, first due at ``first_due`` (monotonic seconds)."""
        with self._lock:
            self._jobs[job_id] = _Expectation(interval, first_due)

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._jobs.pop(job_id, None)

    def clear(self) -> None:
        with self._lock:
            self._jobs.clear()

    def ran(self, job_id: str) -> None:
        """Records that ``job_id`` just completed (successfully or not: it ran)."""
        with self._lock:
            expectation = self._jobs.get(job_id)
            if expectation is not None:
                expectation.reference = self._clock()

    def late_jobs(self) -> list[LateJob]:
        """Jobs that missed more than :data:`MISSED_RUNS_ALLOWED` runs in a row."""
        now = self._clock()
        with self._lock:
            return [
                LateJob(job_id, now - job.reference, job.interval)
                for job_id, job in sorted(self._jobs.items())
                if now - job.reference > MISSED_RUNS_ALLOWED * job.interval + LATENESS_GRACE_SECONDS
            ]
