"""Sending canary requests on time: a precise event loop and a short spin before each send.

The canary counts latency from the *intended* send time (no coordinated omission), so
every microsecond it wakes late is a microsecond added to the latency it reports.
perf_analyzer stamps a request when its worker sends it; to agree with it the canary
must send when it meant to. Measured on the 2-core test machine (benchmarks/
canary_vs_perf_analyzer.py, the instrumented profile in its notes), a default asyncio
loop woke a median 0.75 ms late — CPython rounds every ``epoll_wait`` timeout *up* to
the next millisecond — and the loop's hop from the scheduler to the request's task
added 0.1 ms more: together the largest share of the canary's excess over perf_analyzer.

Two remedies, both here:

* :func:`new_event_loop`: the simulator's :mod:`~tritonwatch.sim.precise_loop`, whose
  selector waits in ``select()`` with microsecond timeouts (no rounding up);
* :func:`sleep_until`, in the request's own task (started :data:`LEAD_SECONDS` early):
  sleep until :data:`SPIN_SECONDS` before the send time, then
  yield to the loop (``asyncio.sleep(0)``) until it comes, so the OS's wake-up latency
  falls inside the spin instead of on the request. The spin yields at every turn,
  so other canaries' answers are still read while it runs; it costs up to
  :data:`SPIN_SECONDS` of CPU per request (1/s × 20 models: 0.6 % of a core at most).
"""

from __future__ import annotations

import asyncio

from tritonwatch.sim import precise_loop

SPIN_SECONDS = 0.3e-3
"""How long before a send the canary stops sleeping and starts yielding until it is time.

The precise loop oversleeps a median 0.1–0.3 ms on the test machine when other work
runs (its p95 grows with load); 0.3 ms covers the median at a CPU cost of at most 0.3 ms
per request. A longer spin buys little: what oversleeps more is the OS not running the
thread at all, which a spin does not help."""


LEAD_SECONDS = 1.5e-3
"""How early the scheduler starts a request's task, which then waits for its send time
with :func:`sleep_until`: the hop from the scheduler to a new task (one loop turn, 0.1 ms
measured) and the scheduler's own late wake-up then fall before the send, not in it."""


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The canary's event loop: timers with sub-millisecond precision where possible."""
    return precise_loop.new_event_loop()


async def sleep_until(when: float, spin: float = SPIN_SECONDS) -> None:
    """Returns as soon after ``when`` (the running loop's clock) as the loop allows."""
    loop = asyncio.get_running_loop()
    delay = when - spin - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)
    while loop.time() < when:
        await asyncio.sleep(0)
