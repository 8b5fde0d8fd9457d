"""The virtual-time loop: exact timers inside a section, real time and real I/O outside."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

import support
from tritonwatch.sim.virtual_loop import VirtualClock, VirtualTimeLoop

T = TypeVar("T")


def run(main: Callable[[VirtualTimeLoop], Coroutine[Any, Any, T]]) -> T:
    """Runs ``main(loop)`` to completion on a fresh virtual-time loop."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(main(loop))
    finally:
        loop.close()


def test_a_long_sleep_in_a_section_takes_exactly_its_time_and_no_real_time() -> None:
    """Breaks if a section waits for real time, or moves the clock by anything but the sleep."""

    async def main(loop: VirtualTimeLoop) -> float:
        with loop.virtual():
            started = loop.time()
            await asyncio.sleep(3600.0)
            return loop.time() - started

    started = time.monotonic()
    assert run(main) == pytest.approx(3600.0, abs=1e-9)  # one rounding of a large clock
    support.assert_within_smoke_bound(time.monotonic() - started, 0.1, "an hour of virtual time")


def test_timers_fire_in_order_at_their_exact_times() -> None:
    """Breaks if concurrent timers fire out of order or off their nominal times."""

    async def main(loop: VirtualTimeLoop) -> list[tuple[str, float]]:
        fired: list[tuple[str, float]] = []
        with loop.virtual():
            start = loop.time()

            async def after(name: str, delay: float) -> None:
                await asyncio.sleep(delay)
                fired.append((name, round(loop.time() - start, 9)))

            await asyncio.gather(after("c", 0.0025), after("a", 0.0005), after("b", 0.001))
        return fired

    assert run(main) == [("a", 0.0005), ("b", 0.001), ("c", 0.0025)]


def test_busy_callbacks_take_no_virtual_time() -> None:
    """Breaks if host work (a slow host, a CPU hog) leaks into the virtual clock."""

    async def main(loop: VirtualTimeLoop) -> float:
        with loop.virtual():
            started = loop.time()
            burn_until = time.monotonic() + 0.02
            while time.monotonic() < burn_until:
                pass
            await asyncio.sleep(0)
            return loop.time() - started

    assert run(main) == 0.0


def test_outside_a_section_the_clock_is_real_and_never_goes_back() -> None:
    """Breaks if leaving a section rewinds the clock, or real sleeps stop waiting."""

    async def main(loop: VirtualTimeLoop) -> tuple[float, float, float]:
        with loop.virtual():
            await asyncio.sleep(10.0)
            virtual_end = loop.time()
        real_started, loop_started = time.monotonic(), loop.time()
        await asyncio.sleep(0.02)
        return virtual_end, loop_started, time.monotonic() - real_started

    virtual_end, after_section, slept = run(main)
    assert after_section >= virtual_end
    assert slept >= 0.02  # a real sleep waits at least its time, however busy the host


def test_io_that_is_ready_is_served_before_the_clock_jumps() -> None:
    """Breaks if a section skips ready socket data and jumps to the next timer first."""

    async def main(loop: VirtualTimeLoop) -> list[tuple[str, float]]:
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        seen: list[tuple[str, float]] = []
        try:
            with loop.virtual():
                start = loop.time()
                writer.send(b"x")

                def on_data() -> None:
                    seen.append((reader.recv(1).decode(), loop.time() - start))

                loop.add_reader(reader, on_data)
                await asyncio.sleep(5.0)
                loop.remove_reader(reader)
                seen.append(("timer", loop.time() - start))
        finally:
            reader.close()
            writer.close()
        return seen

    assert run(main) == [("x", 0.0), ("timer", 5.0)]


def test_with_no_timer_a_section_waits_for_other_threads() -> None:
    """Breaks if a section with nothing scheduled spins or returns before work from
    another thread arrives."""

    async def main(loop: VirtualTimeLoop) -> str:
        future: asyncio.Future[str] = loop.create_future()

        def answer() -> None:
            time.sleep(0.05)
            loop.call_soon_threadsafe(future.set_result, "answered")

        with loop.virtual():
            started = loop.time()
            threading.Thread(target=answer).start()
            answer_text = await future
            assert loop.time() == started
        return answer_text

    assert run(main) == "answered"


def test_sections_nest_and_an_unmatched_exit_is_refused() -> None:
    """Breaks if an inner section ends virtual time early, or exit without enter passes."""
    clock = VirtualClock()
    clock.enter()
    clock.enter()
    clock.advance(2.0)
    frozen = clock.now()
    clock.exit()
    assert clock.virtual and clock.now() == frozen
    clock.exit()
    assert not clock.virtual and clock.now() >= frozen
    with pytest.raises(RuntimeError, match="no virtual section"):
        clock.exit()
    with pytest.raises(RuntimeError, match="only virtual time"):
        clock.advance(1.0)
