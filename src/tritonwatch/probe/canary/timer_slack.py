"""Tighter timer wake-ups for the thread that sends canary requests.

Linux lets a sleeping thread wake up to its *timer slack* late (50 µs by default), so
that the kernel can batch wake-ups; on a virtualised host that slack and the hypervisor
together make a short ``select()`` timeout wake late, with a long tail. With the calling
thread's slack set to 1 ns (``prctl(PR_SET_TIMERSLACK)``) the same sleeps wake closer to
on time and most of the tail goes. Every microsecond a send leaves late is counted as
latency (the canary times from the intended send time), and the spin that absorbs
lateness costs CPU for as long as it lasts, so the canary's threads ask for it.
Elsewhere (another OS, a refused call) nothing changes.
"""

from __future__ import annotations

import sys

from tritonwatch.common.libc import load_libc

PR_SET_TIMERSLACK = 29
"""From <linux/prctl.h>."""
TIGHT_SLACK_NS = 1


def tighten_timer_slack() -> bool:
    """Sets the calling thread's timer slack to 1 ns; True when Linux took it."""
    libc = load_libc() if sys.platform == "linux" else None
    prctl = getattr(libc, "prctl", None)
    return prctl is not None and int(prctl(PR_SET_TIMERSLACK, TIGHT_SLACK_NS, 0, 0, 0)) == 0
