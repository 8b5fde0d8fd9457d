"""ScheduledJobs.bring_forward: a stale capacity's sweep runs now, then keeps its interval;
a job a reload removed is not an error. On APScheduler's own scheduler, not started:
its job store says when each job runs next."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.background import BackgroundScheduler

from tritonwatch.runtime.job_plan import JobKind, JobSpec
from tritonwatch.runtime.scheduled_jobs import ScheduledJobs
from tritonwatch.state.schedule_board import ScheduleBoard


def test_a_sweep_brought_forward_runs_now_and_an_unknown_job_is_refused_quietly() -> None:
    scheduler = BackgroundScheduler(timezone=UTC)
    jobs = ScheduledJobs(scheduler, ScheduleBoard(lambda: 0.0), lambda: 0.0)
    spec = JobSpec("sweep:t:m", JobKind.SWEEP, 3600.0, 3600.0, watched=False)
    jobs.reconcile([spec], lambda _: lambda: None)
    job = scheduler.get_job("sweep:t:m")
    assert job.next_run_time > datetime.now(UTC) + timedelta(minutes=59)
    before = datetime.now(UTC)
    assert jobs.bring_forward("sweep:t:m")
    brought = scheduler.get_job("sweep:t:m")
    assert before <= brought.next_run_time <= datetime.now(UTC)
    assert brought.trigger.interval == timedelta(hours=1)  # then every interval again
    assert not jobs.bring_forward("sweep:t:gone")
