"""The canary's failure log lines: the first whole, then a count a minute (fake clock)."""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from tritonwatch.probe.canary.failures import FULL_LINES, PERIOD_SECONDS, Failure, FailureLog
from tritonwatch.records.observations import Outcome


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _log() -> tuple[FailureLog, FakeClock]:
    clock = FakeClock()
    return FailureLog("prod", "resnet", "http", clock=clock), clock


def _events(logs: list[dict[str, Any]]) -> list[str]:
    return [log["event"] for log in logs]


def _failure(index: int) -> Failure:
    return Failure(Outcome.HTTP_ERROR, f"[500] failure {index}", 500)


def test_the_first_failures_are_logged_whole_with_their_reason() -> None:
    """Breaks if a failure line lacks what a person needs to tell why the canary fails."""
    failures, clock = _log()
    with capture_logs() as logs:
        for index in range(FULL_LINES):
            failures.failed(_failure(index))
            clock.now += 0.5
    assert FULL_LINES == 3
    assert logs == [
        {
            "event": "canary_request_failed",
            "log_level": "warning",
            "component": "canary",
            "target": "prod",
            "model": "resnet",
            "protocol": "http",
            "outcome": "http_error",
            "error": f"[500] failure {index}",
            "status": 500,
        }
        for index in range(FULL_LINES)
    ]


def test_past_the_first_three_one_line_a_minute_counts_the_rest() -> None:
    """Breaks if a model failing at 50/s writes a line per failure, or the count and the
    last reason go missing."""
    failures, clock = _log()
    with capture_logs() as logs:
        for index in range(3 + 100):  # 50/s for about 2 s: nothing more is written
            failures.failed(_failure(index))
            clock.now += 0.02
        first_counted = 1000.0 + 3 * 0.02
        clock.now = first_counted + PERIOD_SECONDS - 0.1
        failures.failed(Failure(Outcome.TIMEOUT, "no answer within 2 s (canary timeout)"))
        assert _events(logs) == ["canary_request_failed"] * 3
        clock.now += 0.2  # the minute is over: the next result writes the count
        failures.failed(_failure(200))
    assert len(logs) == 4  # the last failure is the first of the next minute's count
    summary = logs[-1]
    assert summary["event"] == "canary_failures_suppressed"
    assert summary["count"] == 101
    assert summary["last_outcome"] == "timeout"
    assert summary["last_error"] == "no answer within 2 s (canary timeout)"
    assert "last_status" not in summary
    assert summary["seconds"] == 60.1
    assert (summary["target"], summary["model"], summary["protocol"]) == ("prod", "resnet", "http")


def test_a_success_after_the_minute_writes_the_count_too() -> None:
    """Breaks if the count waits for the next failure (one that may never come)."""
    failures, clock = _log()
    with capture_logs() as logs:
        for index in range(5):
            failures.failed(_failure(index))
        failures.tick()  # a success in the same minute: nothing yet
        assert _events(logs) == ["canary_request_failed"] * 3
        clock.now += PERIOD_SECONDS
        failures.tick()
    assert _events(logs)[-1] == "canary_failures_suppressed"
    assert logs[-1]["count"] == 2


def test_a_quiet_minute_starts_over_with_whole_lines() -> None:
    """Breaks if a model that failed an hour ago is never shown in full again."""
    failures, clock = _log()
    with capture_logs() as logs:
        for index in range(3):
            failures.failed(_failure(index))
        clock.now += PERIOD_SECONDS
        failures.tick()  # a success a minute later, no failure in between
        failures.failed(Failure(Outcome.GRPC_ERROR, "[StatusCode.INTERNAL] later"))
    assert _events(logs) == ["canary_request_failed"] * 4
    assert "status" not in logs[-1]  # gRPC has no HTTP status


def test_stopping_writes_what_is_still_counted() -> None:
    """Breaks if a reload or shutdown loses the failures of the last minute."""
    failures, _ = _log()
    with capture_logs() as logs:
        for index in range(4):
            failures.failed(_failure(index))
        failures.flush()
        failures.flush()  # nothing left: no second line
    assert _events(logs) == ["canary_request_failed"] * 3 + ["canary_failures_suppressed"]
    assert logs[-1]["count"] == 1


def test_the_count_line_repeats_the_last_http_status() -> None:
    """Breaks if the count of an HTTP model's failures drops the status of the last one
    (a 503 from a proxy reads differently from a 500 from Triton)."""
    failures, _ = _log()
    with capture_logs() as logs:
        for index in range(3):
            failures.failed(_failure(index))
        failures.failed(Failure(Outcome.HTTP_ERROR, "[503] Service Unavailable", 503))
        failures.flush()
    summary = logs[-1]
    assert (summary["event"], summary["count"]) == ("canary_failures_suppressed", 1)
    assert (summary["last_outcome"], summary["last_error"], summary["last_status"]) == (
        "http_error",
        "[503] Service Unavailable",
        503,
    )


def test_the_count_line_gives_its_seconds_to_a_tenth_from_the_time_it_is_given() -> None:
    """Breaks if the period a count covers is rounded otherwise than to 0.1 s, or is
    measured on the clock instead of at the ``now`` the caller passes."""
    failures, _ = _log()  # the clock stays at 1000
    with capture_logs() as logs:
        for index in range(4):
            failures.failed(_failure(index))
        failures.flush(1012.345)
    assert logs[-1]["seconds"] == 12.3


def test_a_tick_judges_the_period_at_the_time_it_is_given() -> None:
    """Breaks if ``tick(now)`` reads the clock instead of ``now``: the count is due at
    the end of its period whatever the clock says."""
    failures, _ = _log()  # the clock stays at 1000
    with capture_logs() as logs:
        for index in range(5):
            failures.failed(_failure(index))
        failures.tick(1000.0 + PERIOD_SECONDS - 0.01)
        assert _events(logs) == ["canary_request_failed"] * 3
        failures.tick(1000.0 + PERIOD_SECONDS)
    assert _events(logs) == ["canary_request_failed"] * 3 + ["canary_failures_suppressed"]
    assert (logs[-1]["count"], logs[-1]["seconds"]) == (2, 60.0)


def test_the_number_of_whole_lines_and_the_period_are_the_callers() -> None:
    """Breaks if FailureLog ignores the ``full_lines`` and ``period`` it is given."""
    clock = FakeClock()
    failures = FailureLog("prod", "resnet", "grpc", full_lines=1, period=5.0, clock=clock)
    with capture_logs() as logs:
        failures.failed(_failure(0))
        failures.failed(_failure(1))
        clock.now += 5.0
        failures.tick()
    assert _events(logs) == ["canary_request_failed", "canary_failures_suppressed"]
    assert (logs[-1]["count"], logs[-1]["seconds"], logs[-1]["protocol"]) == (1, 5.0, "grpc")


def test_a_failure_reads_the_clock_once_and_judges_the_period_at_that_instant() -> None:
    """Breaks if a failure's count line is timed by a second clock read instead of the
    instant the failure was taken at (each read of this clock is a later instant)."""
    readings = iter([0.0, 1.0, 61.0, 62.0, 63.0])
    failures = FailureLog("prod", "resnet", "http", full_lines=1, clock=lambda: next(readings))
    with capture_logs() as logs:
        failures.failed(_failure(0))  # at 0: whole
        failures.failed(_failure(1))  # at 1: counted
        failures.failed(_failure(2))  # at 61: the count of the minute since 1 is due
    # ... and the minute since the last failure was quiet: the failure at 61 is whole again
    assert _events(logs) == [
        "canary_request_failed",
        "canary_failures_suppressed",
        "canary_request_failed",
    ]
    assert (logs[1]["count"], logs[1]["seconds"]) == (1, 60.0)


def test_after_a_quiet_minute_the_first_three_failures_are_whole_again() -> None:
    """Breaks if starting over gives fewer whole lines than a model's first failures got."""
    failures, clock = _log()
    with capture_logs() as logs:
        for index in range(3):
            failures.failed(_failure(index))
        clock.now += PERIOD_SECONDS
        failures.tick()
        for index in range(4):
            failures.failed(_failure(10 + index))
    assert _events(logs) == ["canary_request_failed"] * 6
    assert [log["error"] for log in logs[3:]] == [f"[500] failure {n}" for n in (10, 11, 12)]
