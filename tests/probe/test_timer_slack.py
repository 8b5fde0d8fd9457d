"""The engine's thread asks Linux for a tight timer slack: its sends leave on time."""

from __future__ import annotations

import ctypes
import sys
import threading

import pytest

from tritonwatch.probe.canary import timer_slack

pytestmark = pytest.mark.real


@pytest.mark.skipif(sys.platform != "linux", reason="timer slack is a Linux setting")
def test_the_thread_asks_linux_for_a_tight_timer_slack() -> None:
    """Breaks if tighten_timer_slack stops setting the calling thread's slack to 1 ns
    (select() then wakes up to 50 µs later by design; p95 0.8 ms late on the test VM),
    or sets another thread's."""
    libc = ctypes.CDLL(None)
    pr_get_timerslack = 30
    before = libc.prctl(pr_get_timerslack, 0, 0, 0, 0)
    seen: list[tuple[bool, int]] = []

    def probe() -> None:
        seen.append((timer_slack.tighten_timer_slack(), libc.prctl(pr_get_timerslack, 0, 0, 0, 0)))

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join(5)
    assert seen == [(True, 1)]
    assert libc.prctl(pr_get_timerslack, 0, 0, 0, 0) == before  # this thread untouched
