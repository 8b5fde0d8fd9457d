"""The simulator's event loop waits sub-millisecond times without rounding them up.

What the wait takes on this host is measured in ``test_precise_loop_bench.py``; here the
mechanism is checked: the timeout reaches ``select()`` as asked, and epoll is only
polled (CPython's ``epoll_wait`` would round 200 µs up to a whole millisecond).
"""

from __future__ import annotations

import select
import sys
from typing import Any

import pytest

from tritonwatch.common import precise_loop

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="the precise selector is Linux-only")
]


def test_a_sub_millisecond_timeout_waits_in_select_and_only_polls_epoll(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Breaks if the 200 µs timeout is rounded, or epoll_wait is asked to block."""
    waits: list[float] = []
    polls: list[float] = []
    real_select = select.select

    def recording_select(*args: Any) -> Any:
        waits.append(args[3])
        return real_select(*args)

    class RecordingEpoll:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def poll(self, timeout: float = -1, maxevents: int = -1) -> Any:
            polls.append(timeout)
            return self._inner.poll(timeout, maxevents)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    monkeypatch.setattr(select, "select", recording_select)
    selector = precise_loop.PreciseEpollSelector()
    try:
        monkeypatch.setattr(selector, "_selector", RecordingEpoll(selector._selector))  # type: ignore[attr-defined]
        assert selector.select(200e-6) == []
        assert selector.select(0) == []
    finally:
        selector.close()
    assert waits == [200e-6]  # the one wait, exactly as asked; a zero timeout never waits
    assert polls == [0, 0]


def test_a_loop_from_new_event_loop_uses_the_precise_selector() -> None:
    """Breaks if the simulator's loop falls back to the default (rounding) selector."""
    loop = precise_loop.new_event_loop()
    try:
        assert isinstance(loop._selector, precise_loop.PreciseEpollSelector)  # type: ignore[attr-defined]
    finally:
        loop.close()
