"""Measured: the simulator's event loop sleeps for sub-millisecond times (a benchmark)."""

from __future__ import annotations

import asyncio
import statistics
import sys

import pytest

from tritonwatch.common import precise_loop

pytestmark = pytest.mark.bench


@pytest.mark.skipif(sys.platform != "linux", reason="the precise selector is Linux-only")
def test_sub_millisecond_sleeps_are_not_rounded_up_to_a_millisecond() -> None:
    """A 200 µs sleep takes well under the 1 ms CPython's epoll wait rounds it up to."""

    async def durations() -> list[float]:
        loop = asyncio.get_running_loop()
        taken = []
        for _ in range(30):
            started = loop.time()
            await asyncio.sleep(200e-6)
            taken.append(loop.time() - started)
        return taken

    taken = precise_loop.run(durations())
    assert 200e-6 <= statistics.median(taken) < 700e-6
