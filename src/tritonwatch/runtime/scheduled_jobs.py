"""The daemon's APScheduler jobs, brought to each new plan by its changes.

Who owns what: :class:`ScheduledJobs` owns the scheduler's jobs and what each was
scheduled as. Only the daemon's lifecycle (under its lock) calls
:meth:`ScheduledJobs.reconcile`; the jobs themselves run on the scheduler's threads and
report each run to the schedule board (``/health``).

A reconcile touches only what changed (:func:`~tritonwatch.runtime.job_plan.plan_changes`):
a job whose schedule is the same keeps its timer and its place on the schedule board,
so a reload or a discovery change does not reset every job's next run; changed and new
jobs are (re)added at their first delay, removed ones go.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.triggers.interval import IntervalTrigger

from tritonwatch.common.logs import get_logger
from tritonwatch.runtime.job_plan import JobSpec, PlanChanges, plan_changes
from tritonwatch.state.schedule_board import ScheduleBoard

_log = get_logger("daemon")
Work = Callable[[], object]


class ScheduledJobs:
    """The jobs of ``scheduler``; watched ones are expected on ``board``."""

    def __init__(
        self, scheduler: BaseScheduler, board: ScheduleBoard, clock: Callable[[], float]
    ) -> None:
        self._scheduler = scheduler
        self._board = board
        self._clock = clock
        self._jobs: dict[str, JobSpec] = {}
        """The jobs scheduled, by id, as their plan gave them."""

    def reconcile(self, plan: Sequence[JobSpec], work: Callable[[JobSpec], Work]) -> PlanChanges:
        """Brings the jobs to ``plan``; ``work`` says what a spec's job does. Returns
        what changed."""
        changes = plan_changes(self._jobs, plan)
        for job_id in (*changes.removed, *(spec.job_id for spec in changes.changed)):
            self._scheduler.remove_job(job_id)
            self._board.forget(job_id)
            del self._jobs[job_id]
        now, wall_now = self._clock(), datetime.now(UTC)
        for spec in (*changes.changed, *changes.added):
            run = work(spec)
            if spec.watched:
                self._board.expect(spec.job_id, spec.interval, now + spec.first_delay)
                run = functools.partial(self._run_watched, spec.job_id, run)
            self._scheduler.add_job(
                run,
                IntervalTrigger(seconds=spec.interval, timezone=UTC),
                id=spec.job_id,
                next_run_time=wall_now + timedelta(seconds=spec.first_delay),
                misfire_grace_time=spec.misfire_grace,
            )
            self._jobs[spec.job_id] = spec
        return changes

    def bring_forward(self, job_id: str) -> bool:
        """Runs the job ``job_id`` at once (then on its interval again); False when no
        such job is scheduled (a reload removed it meanwhile). Any thread may call it:
        the scheduler's own lock serialises it with :meth:`reconcile`'s changes."""
        try:
            self._scheduler.modify_job(job_id, next_run_time=datetime.now(UTC))
        except JobLookupError:
            return False
        return True

    def _run_watched(self, job_id: str, work: Work) -> None:
        """Runs a job's work and records that it ran (for /health), whatever happened."""
        try:
            work()
        except Exception:  # a job logs and runs again next time; it never dies
            _log.exception("job_failed", job=job_id)
        finally:
            self._board.ran(job_id)
