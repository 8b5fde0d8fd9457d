"""The ``/health`` answer: healthy when the daemon is started, every job ran on time and
every canary is producing outcomes.

A daemon whose HTTP server answers but whose work stopped (a wedged executor, a
deadlocked probe, a canary gone silent) is not healthy: the answer is 503 with what is
late or stalled named, so a Kubernetes liveness probe restarts it. A canary engine that
crashed and restarted itself is *degraded*, 200 with the reason, for its settling time:
it has already recovered (its restarts are counted in
``tritonwatch_canary_engine_restarts_total``), and restarting the pod would only lose
the SLO windows in memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tritonwatch.export.http_server import HealthReport

if TYPE_CHECKING:
    from tritonwatch.state.canary_board import SeriesKey
    from tritonwatch.state.schedule_board import LateJob


def health_report(
    run_state: str,
    *,
    started: bool,
    late: Sequence[LateJob],
    jobs: int,
    stalled: Sequence[SeriesKey] = (),
    engine_restarts: int = 0,
    engine_recovering: bool = False,
) -> HealthReport:
    """The report for a daemon in ``run_state`` whose schedule board found ``late`` jobs; ``jobs``
    counts the targets checked, for the healthy answer; ``stalled`` are the canaries
    silent too long; ``engine_recovering``: the engine crashed within its settling time."""
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
    reasons = []
    if stalled:
        reasons.append("canaries produced no outcome for too long")
    if engine_recovering:
        reasons.append("the canary engine crashed and restarted")
    if reasons:
        body = {
            "status": "degraded",
            "reasons": reasons,
            "stalled_canaries": [
                {"target": target, "model": model, "protocol": protocol}
                for target, model, protocol in stalled
            ],
            "canary_engine_restarts": engine_restarts,
        }
        return HealthReport(not stalled, body)
    return HealthReport(True, {"status": "healthy", "jobs": jobs})
