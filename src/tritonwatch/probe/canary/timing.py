"""Sending canary requests on time: a precise event loop and a short spin before each send.

The canary counts latency from the *intended* send time (no coordinated omission), so
every microsecond it wakes late is a microsecond added to the latency it reports.
perf_analyzer stamps a request when its worker sends it; to agree with it the canary
must send when it meant to. A default asyncio loop wakes late — CPython rounds every
``epoll_wait`` timeout *up* to the next millisecond — and the loop's hop from the
scheduler to the request's task adds more: together they were the largest share of the
canary's excess over perf_analyzer (benchmarks/RESULTS.md, §4b: the canary against
perf_analyzer on real Triton).

Two remedies, both here:

* :func:`new_event_loop`: the simulator's :mod:`~tritonwatch.common.precise_loop`, whose
  selector waits in ``select()`` with microsecond timeouts (no rounding up);
* :meth:`WakeTimer.sleep_until`, in the request's own task (made when the request
  before it went out): sleep until shortly before the send time, then
  yield to the loop (``asyncio.sleep(0)``) until it comes, so the OS's wake-up latency
  falls inside the spin instead of on the request. The spin yields at every turn,
  so other canaries' answers are still read while it runs.

The spin is CPU, and so is every wake-up: an OS wake-up of a thread costs CPU, and an
``asyncio.sleep`` round more still, so the canary's cost per request is mostly how often
it wakes and how long it spins (benchmarks/RESULTS.md, §3b: where the footprint's CPU
goes). Hence :class:`WakeTimer`: the spin starts only as early as the loop has recently
overslept (30 of its last 32 oversleeps, at most :data:`SPIN_SECONDS`), so on a quiet
host it spins a fraction of :data:`SPIN_SECONDS`; and the canary creates each request's
task when the previous one sends (one timer wake-up per request, not a scheduler's
wake-up and then the task's).
"""

from __future__ import annotations

import asyncio
from collections import deque

from tritonwatch.common import precise_loop

SPIN_SECONDS = 0.3e-3
"""How long before a send the canary stops sleeping and starts yielding until it is time.

It covers the precise loop's usual oversleep when other work runs (its tail grows with
load), at a CPU cost of at most this much spin per request. A longer spin buys little:
what oversleeps more is the OS not running the thread at all, which a spin does not
help."""


SPIN_QUANTILE_SIXTEENTHS = 15
"""The spin covers this many sixteenths of recent oversleeps (30 of the last 32).

The upper quartile (12/16) left one send in four late by its excess over the spin, and
a latency p95 reads exactly that tail, which put the canary's p95 well over
perf_analyzer's (benchmarks/RESULTS.md, §4b: the canary against perf_analyzer on real
Triton). With the threads' timer slack tightened (probe/canary/timer_slack.py) the
oversleeps up to their p94 are short, so covering them costs little polling."""
OVERSLEEP_MEMORY = 32
"""How many recent wake-ups :class:`WakeTimer` remembers to estimate the next one's lateness."""


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The canary's event loop: timers with sub-millisecond precision where possible."""
    return precise_loop.new_event_loop()


class WakeTimer:
    """:meth:`sleep_until` with a spin as long as the loop's recent lateness needs.

    A timer that fires ``x`` late is covered by a spin of ``x``; spinning
    :data:`SPIN_SECONDS` on every request when the loop oversleeps far less wastes the
    rest as CPU. Each sleep records how late it woke, and the next spin starts at the
    :data:`SPIN_QUANTILE_SIXTEENTHS` quantile of the last :data:`OVERSLEEP_MEMORY` of
    them (never more than :data:`SPIN_SECONDS`): 15 sends in 16 then start on time, so
    the latency p95 is not the lateness of the others.
    """

    def __init__(self, cap: float = SPIN_SECONDS) -> None:
        self._cap = cap
        self._late: deque[float] = deque([cap], maxlen=OVERSLEEP_MEMORY)

    @property
    def spin_seconds(self) -> float:
        """How long before a send the next sleep ends and the spin starts."""
        ordered = sorted(self._late)
        return min(self._cap, ordered[(SPIN_QUANTILE_SIXTEENTHS * len(ordered)) // 16])

    def record(self, lateness: float) -> None:
        """Remembers how late one sleep ended (negative: early, counted as on time)."""
        self._late.append(max(0.0, lateness))

    async def sleep_until(self, when: float) -> None:
        """Returns as soon after ``when`` (the running loop's clock) as the loop allows,
        never before it."""
        loop = asyncio.get_running_loop()
        wake = when - self.spin_seconds
        delay = wake - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
            self.record(loop.time() - wake)
        while loop.time() < when:
            await asyncio.sleep(0)
