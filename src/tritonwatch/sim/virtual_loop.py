"""An event loop whose clock can run on virtual time, so simulated timings are exact.

Everything the simulator does takes its time from ``loop.time()``: queue delays, GPU
kernels, service-time sleeps. On a busy host those timers fire late and the figures a
test reads (throughput, p95, utilisation) drift with the host. ``VirtualTimeLoop``
keeps the real clock (monotonic plus an offset) for ordinary work — sockets, clients
in other threads — and runs on *virtual* time inside ``with loop.virtual():`` sections:

* the clock is frozen: callbacks take no time, however slow the host;
* when nothing is ready and the selector has no event (polled with a zero timeout),
  the clock jumps to the next timer instead of waiting for it.

So a load driven in process inside a section (``Simulator(clock="virtual")`` wraps
every ``run_async`` in one) produces its nominal numbers exactly. Leaving the section
the clock resumes real time from where virtual time stopped, so it never goes back.

A section only suits work that waits on timers alone: I/O from outside (a client over a
socket) still arrives, but the clock does not wait for it, and a loop that never awaits
a timer (``while loop.time() < deadline`` around zero-time work) never ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import sys
import time
from collections.abc import Iterator

from tritonwatch.common import precise_loop

if sys.platform == "linux":
    _BaseSelector = precise_loop.PreciseEpollSelector
else:  # pragma: no cover - the simulator's home is Linux
    _BaseSelector = selectors.DefaultSelector


class VirtualClock:
    """Real monotonic seconds plus an offset; frozen and stepped by hand while virtual."""

    def __init__(self) -> None:
        self._offset = 0.0
        self._frozen: float | None = None
        self._depth = 0

    @property
    def virtual(self) -> bool:
        """Whether a virtual section is active."""
        return self._depth > 0

    def now(self) -> float:
        """The loop's time."""
        return self._frozen if self._frozen is not None else time.monotonic() + self._offset

    def enter(self) -> None:
        """Starts (or nests) a virtual section: the clock stops where it is."""
        if self._depth == 0:
            self._frozen = self.now()
        self._depth += 1

    def exit(self) -> None:
        """Ends one section; the outermost one lets real time run on from virtual time."""
        if self._depth == 0:
            raise RuntimeError("no virtual section to leave")
        self._depth -= 1
        if self._depth == 0 and self._frozen is not None:
            self._offset = self._frozen - time.monotonic()
            self._frozen = None

    def advance(self, seconds: float) -> None:
        """Moves virtual time on (only inside a section)."""
        if self._frozen is None:
            raise RuntimeError("only virtual time can be advanced")
        self._frozen += max(0.0, seconds)


class VirtualSelector(_BaseSelector):
    """A selector that, in a virtual section, polls instead of waiting and moves the
    clock to the timeout the loop asked for (its next timer)."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        # None means no timer at all: only outside I/O can wake the loop, so wait for it.
        if self._clock.virtual and timeout is not None and timeout > 0:
            events = super().select(0)
            if not events:
                self._clock.advance(timeout)
            return events
        return super().select(timeout)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop on a :class:`VirtualClock` (see the module docstring)."""

    def __init__(self) -> None:
        self.clock = VirtualClock()
        super().__init__(VirtualSelector(self.clock))

    def time(self) -> float:
        return self.clock.now()

    @contextlib.contextmanager
    def virtual(self) -> Iterator[None]:
        """Runs the body's awaits on virtual time (call from the loop's own thread)."""
        self.clock.enter()
        try:
            yield
        finally:
            self.clock.exit()
