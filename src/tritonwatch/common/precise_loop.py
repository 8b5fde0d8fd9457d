"""An asyncio event loop whose timers fire with sub-millisecond precision.

The default loop on Linux waits in ``epoll_wait``, whose timeout is whole milliseconds:
CPython rounds every wait *up* to the next millisecond, so ``asyncio.sleep(50e-6)``
takes about 1 ms and a 2.3 ms service time takes 3 ms. A simulator whose job is to
produce exact service times cannot live with that. ``PreciseEpollSelector`` waits in
``select()`` on the epoll descriptor itself instead — ``select`` takes microseconds and
the epoll descriptor turns readable as soon as any registered socket has an event — then
collects the events with a non-blocking ``epoll_wait``. One extra system call per wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import selectors
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_SELECT_FD_LIMIT = 1024  # FD_SETSIZE: select() cannot watch descriptors at or above it


if sys.platform == "linux":

    class PreciseEpollSelector(selectors.EpollSelector):
        """``EpollSelector`` that blocks in ``select()`` for microsecond timeouts."""

        def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
            if timeout is not None and timeout > 0 and self.fileno() < _SELECT_FD_LIMIT:
                with contextlib.suppress(InterruptedError):
                    select.select([self.fileno()], [], [], timeout)
                timeout = 0
            return super().select(timeout)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop with precise timers where the platform allows it."""
    if sys.platform == "linux":
        return asyncio.SelectorEventLoop(PreciseEpollSelector())
    return asyncio.new_event_loop()


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on a precise loop."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(main)
