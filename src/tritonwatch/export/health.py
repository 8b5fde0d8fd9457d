"""The ``/health`` answer: healthy when the daemon is started and every job ran on time.

A daemon whose HTTP server answers but whose jobs stopped running (a wedged executor, a
deadlocked probe) is not healthy: the answer is 503 with the late jobs named, so a
Kubernetes liveness probe restarts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tritonwatch.export.http_server import HealthReport

if TYPE_CHECKING:
    from tritonwatch.schedule_health import LateJob


def health_report(
    run_state: str, *, started: bool, late: Sequence[LateJob], jobs: int
) -> HealthReport:
    """The report for a daemon in ``run_state`` whose ledger found ``late`` jobs; ``jobs``
    counts the targets checked, for the healthy answer."""
    if not started:
        return HealthReport(False, {"status": "unhealthy", "reason": f"daemon is {run_state}"})
    if late:
        return HealthReport(
            False,
            {
                "status": "unhealthy",
                "reason": "jobs did not run on schedule",
                "late_jobs": [
                    {
                        "job": job.job_id,
                        "seconds_since_last_run": round(job.seconds_since_last_run, 3),
                        "interval_seconds": job.interval_seconds,
                    }
                    for job in late
                ],
            },
        )
    return HealthReport(True, {"status": "healthy", "jobs": jobs})
