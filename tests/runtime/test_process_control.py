"""The process's command loop (``runtime.process.ProcessControl``): what the daemon is
asked to do, in which order, whoever asks — a signal handler or another thread."""

from __future__ import annotations

import os
import signal
import threading

import pytest
from structlog.testing import capture_logs

from tritonwatch.runtime import process


class Recorder:
    """A daemon that records its lifecycle calls."""

    def __init__(self, fail_start: bool = False, reloads: bool = True) -> None:
        self.calls: list[str] = []
        self._fail_start = fail_start
        self._reloads = reloads

    def start(self) -> None:
        self.calls.append("start")
        if self._fail_start:
            raise OSError("address already in use")

    def reload(self) -> bool:
        self.calls.append("reload")
        return self._reloads

    def stop(self) -> None:
        self.calls.append("stop")


@pytest.fixture(autouse=True)
def no_process_effects(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """No gc.freeze in the test process and no real exit; the exit's deadlines recorded."""
    deadlines: list[float] = []
    monkeypatch.setattr(process, "freeze_start_up_objects", lambda: None)
    monkeypatch.setattr(process, "exit_within", deadlines.append)
    return deadlines


def test_requests_from_another_thread_reload_then_stop_in_order(
    no_process_effects: list[float],
) -> None:
    """Breaks if a request from a worker thread (the exporter's ``POST /-/reload``) is
    lost, run out of order, or the stop does not end the loop with exit status 0."""
    control, daemon = process.ProcessControl(), Recorder()

    def asks() -> None:
        for command in ("reload", "reload", "stop"):
            control.request(command)  # type: ignore[arg-type]

    worker = threading.Thread(target=asks)
    worker.start()
    status = control.serve(lambda: daemon)
    worker.join()
    assert status == process.EXIT_OK
    assert daemon.calls == ["start", "reload", "reload", "stop"]
    assert len(no_process_effects) == 1  # the bounded exit ran once, after the stop


def test_a_daemon_that_cannot_start_is_stopped_and_the_status_says_so(
    no_process_effects: list[float],
) -> None:
    """Breaks if a start failure (the port taken) leaves threads running or exits 0."""
    daemon = Recorder(fail_start=True)
    assert process.ProcessControl().serve(lambda: daemon) == process.EXIT_START_FAILED
    assert daemon.calls == ["start", "stop"]
    assert no_process_effects == []


def test_sighup_asks_for_a_reload_and_sigterm_for_a_stop() -> None:
    """Breaks if the handlers stop mapping SIGHUP to reload and SIGTERM/SIGINT to stop."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)}
    control = process.ProcessControl()
    try:
        control.install_signal_handlers()
        for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
            os.kill(os.getpid(), sig)  # handled on the main thread before kill returns here
        assert [control.next_command() for _ in range(3)] == ["reload", "stop", "stop"]
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@pytest.mark.parametrize("reloads", [True, False])
def test_a_reload_asked_from_another_thread_gets_the_main_threads_outcome(reloads: bool) -> None:
    """Breaks if ``POST /-/reload`` (``reload_and_wait`` on the exporter's thread) is not
    run by the main thread as SIGHUP's reload is, or is told another outcome than the
    reload's (200 for a config that stayed out would be a lie)."""
    control = process.ProcessControl()
    daemon = Recorder(reloads=reloads)
    answers: list[bool] = []

    def exporter_thread() -> None:
        answers.append(control.reload_and_wait(timeout=30))
        control.request("stop")

    worker = threading.Thread(target=exporter_thread)
    worker.start()
    assert control.serve(lambda: daemon) == process.EXIT_OK
    worker.join()
    assert answers == [reloads]
    assert daemon.calls == ["start", "reload", "stop"]


class RaisingReload(Recorder):
    """A daemon whose reloads raise, as one whose canaries' apply timed out did."""

    def reload(self) -> bool:
        self.calls.append("reload")
        raise TimeoutError("the canaries' reconcile did not finish in 4 s")


def test_a_reload_that_raises_is_a_failed_reload_and_the_main_thread_serves_on(
    no_process_effects: list[float],
) -> None:
    """R4. Breaks if an exception out of a reload (an apply that timed out) escapes the
    command loop: the main thread would die without stopping the daemon, and ``POST
    /-/reload`` would wait out its timeout for an answer that never comes."""
    control, daemon = process.ProcessControl(), RaisingReload()
    answers: list[bool] = []

    def exporter_thread() -> None:
        answers.append(control.reload_and_wait(timeout=30))
        control.request("reload")  # the next one is served too
        control.request("stop")

    worker = threading.Thread(target=exporter_thread, daemon=True)
    worker.start()
    with capture_logs() as logs:
        status = control.serve(lambda: daemon)
    worker.join(30)
    assert status == process.EXIT_OK
    assert answers == [False]
    assert daemon.calls == ["start", "reload", "reload", "stop"]
    assert [event["event"] for event in logs] == ["reload_raised", "reload_raised"]
    assert len(no_process_effects) == 1  # the bounded exit ran, after the stop
