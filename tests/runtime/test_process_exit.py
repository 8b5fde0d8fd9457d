"""The daemon's exit on a stop signal waits for its worker threads until a deadline,
then leaves the stragglers behind and says which (``process.exit_within``).

The exact half of "SIGTERM ends the process within 5 s": threads that end in time are
joined, a thread stuck past the deadline (a probe on a hanging server) is abandoned,
named in ``exit_abandons_threads``, and the process exits 0 at once. The real process's
exit time has only a smoke bound (tests/e2e/test_daemon_process.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from tritonwatch.runtime import process


@pytest.fixture
def exits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The codes ``os._exit`` was called with (it is not, for real)."""
    codes: list[int] = []
    monkeypatch.setattr(process.os, "_exit", codes.append)
    return codes


@pytest.fixture
def stuck() -> Iterator[threading.Thread]:
    """A worker thread (not a daemon thread) that ends only when the test lets it."""
    release = threading.Event()
    thread = threading.Thread(target=release.wait, name="stuck-probe")
    thread.start()
    yield thread
    release.set()
    thread.join()


def _only(monkeypatch: pytest.MonkeyPatch, *threads: threading.Thread) -> None:
    """The process's threads, as the exit sees them: the main thread and ``threads``
    (not whatever else the test runner keeps)."""
    listed = [threading.main_thread(), *threads]
    monkeypatch.setattr(process.threading, "enumerate", lambda: list(listed))


def test_a_thread_stuck_past_the_deadline_is_abandoned_and_named(
    monkeypatch: pytest.MonkeyPatch, exits: list[int], stuck: threading.Thread
) -> None:
    """Breaks if the exit waits on a stuck thread past its deadline (the process would
    hang until the probe's own timeout) or abandons it without saying so, or exits
    with another code than 0."""
    _only(monkeypatch, stuck)
    with capture_logs() as logs:
        process.exit_within(time.monotonic() + 0.05)
    assert stuck.is_alive()  # the deadline passed, the thread did not end
    assert exits == [process.EXIT_OK]
    abandoned = [log for log in logs if log["event"] == "exit_abandons_threads"]
    assert [log["threads"] for log in abandoned] == [["stuck-probe"]]
    assert abandoned[0]["log_level"] == "warning"


def test_threads_that_end_before_the_deadline_are_joined_and_nothing_is_abandoned(
    monkeypatch: pytest.MonkeyPatch, exits: list[int]
) -> None:
    """Breaks if a worker thread that ends in time is abandoned (its work cut short,
    ``os._exit`` skipping the interpreter's own exit) or not waited for."""
    go = threading.Event()
    done: list[str] = []

    def work() -> None:
        go.wait()
        done.append("finished")

    worker = threading.Thread(target=work, name="sweep")
    worker.start()
    _only(monkeypatch, worker)
    letting_go = threading.Timer(0.05, go.set)  # the sweep ends while the exit waits
    letting_go.start()
    with capture_logs() as logs:
        process.exit_within(time.monotonic() + 60)
    letting_go.join()
    assert done == ["finished"]
    assert not worker.is_alive()
    assert exits == []
    assert not [log for log in logs if log["event"] == "exit_abandons_threads"]


def test_the_shutdown_budget_and_the_signal_poll_fit_in_five_seconds() -> None:
    """Breaks if the main thread's wait for a signal plus the budget the exit waits for
    threads stop fitting SIGTERM's 5 s."""
    assert process.SHUTDOWN_BUDGET_SECONDS + process.COMMAND_POLL_SECONDS < 5.0
