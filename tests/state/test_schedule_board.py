"""/health's rule: a job is late once it missed two runs (plus a second of grace)."""

from __future__ import annotations

from tritonwatch.state.schedule_board import LateJob, ScheduleBoard


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_job_that_runs_on_time_is_never_late() -> None:
    """A job that runs every interval is never reported late."""
    clock = FakeClock()
    board = ScheduleBoard(clock)
    board.expect("readiness:a", interval=5.0, first_due=1002.0)
    for _ in range(10):
        clock.now += 5.0
        board.ran("readiness:a")
        assert board.late_jobs() == []


def test_a_job_that_never_ran_is_late_after_two_intervals_past_its_first_due_time() -> None:
    """A job that never ran is late only after two intervals and a second past its first due."""
    clock = FakeClock()
    board = ScheduleBoard(clock)
    board.expect("readiness:a", interval=5.0, first_due=1002.0)
    clock.now = 1002.0 + 2 * 5.0 + 1.0
    assert board.late_jobs() == []
    clock.now += 0.5
    assert board.late_jobs() == [LateJob("readiness:a", 11.5, 5.0)]


def test_a_job_that_stopped_running_becomes_late_and_recovers() -> None:
    """A job that stops running turns late alone, and is no longer late once it runs."""
    clock = FakeClock()
    board = ScheduleBoard(clock)
    board.expect("a", interval=1.0, first_due=1000.0)
    board.expect("b", interval=10.0, first_due=1000.0)
    board.ran("a")
    board.ran("b")
    clock.now += 3.5
    assert [job.job_id for job in board.late_jobs()] == ["a"]
    board.ran("a")
    assert board.late_jobs() == []


def test_forgotten_and_unknown_jobs_do_not_count() -> None:
    """Forgotten jobs and runs of jobs never expected do not make /health late."""
    clock = FakeClock()
    board = ScheduleBoard(clock)
    board.expect("gone", interval=1.0, first_due=1000.0)
    board.forget("gone")
    board.ran("never-expected")
    clock.now += 100
    assert board.late_jobs() == []
