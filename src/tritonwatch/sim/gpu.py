"""A simulated GPU that instances share, so throughput saturates as on real hardware.

Model: processor sharing with a capacity of 1. Each running kernel (one batch execution)
asks for an *occupancy* ``o`` (the fraction of the GPU it keeps busy alone); background
work from other processes adds a constant occupancy. While the total ``Σo`` is at most 1
every kernel runs at full speed; above 1 every kernel slows to ``1/Σo``. So adding
instances raises throughput until ``Σo`` reaches 1, then only stretches service times.

*Utilisation* is the time average of ``min(1, Σo)`` over the metrics interval — the
busy fraction of the GPU's capacity, which reaches 1 exactly when it saturates.
Power is ``idle + (limit − idle) × utilisation``; energy integrates it exactly.

``SharedGpu`` is pure bookkeeping driven by explicit timestamps, so tests use a fake
clock; ``GpuScheduler`` drives it from an asyncio loop with one timer.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from dataclasses import dataclass, field

from tritonwatch.sim.models import GpuSpec

_FINISH_TOLERANCE_S = 1e-6


@dataclass(order=True)
class Kernel:
    """One execution running on the GPU; ``finish_virtual`` orders the heap."""

    finish_virtual: float
    sequence: int
    occupancy: float = field(compare=False)
    done: asyncio.Future[None] | None = field(default=None, compare=False)
    active: bool = field(default=True, compare=False)


@dataclass(frozen=True)
class GpuSample:
    """The readings Triton's metrics poller would publish for one GPU."""

    utilization: float
    power_watts: float
    energy_joules: float
    memory_used_bytes: int


class OutOfGpuMemoryError(Exception):
    """An allocation would exceed the GPU's memory."""


class SharedGpu:
    """Processor-sharing accounting of one simulated GPU (see the module docstring)."""

    def __init__(self, spec: GpuSpec, now: float) -> None:
        self.spec = spec
        self._virtual = 0.0
        self._last = now
        self._running: list[Kernel] = []
        self._running_occupancy = 0.0
        self._background = 0.0
        self._sequence = itertools.count()
        self._busy_seconds = 0.0
        self._allocations: dict[str, int] = {}
        self._sample_at = now
        self._sample_busy = 0.0
        self._energy = 0.0
        self._last_utilization = 0.0

    @property
    def total_occupancy(self) -> float:
        """Σo of running kernels plus background work."""
        return self._running_occupancy + self._background

    @property
    def rate(self) -> float:
        """How fast each kernel progresses (1 = as fast as alone)."""
        return 1.0 / max(1.0, self.total_occupancy)

    @property
    def busy_seconds(self) -> float:
        """Integral of ``min(1, Σo)`` since start (or the last counter reset)."""
        return self._busy_seconds

    def advance(self, now: float) -> None:
        """Brings virtual time and the busy integral up to ``now``."""
        elapsed = now - self._last
        if elapsed > 0:
            self._virtual += elapsed * self.rate
            self._busy_seconds += elapsed * min(1.0, self.total_occupancy)
            self._last = now

    def set_background(self, now: float, occupancy: float) -> None:
        """Sets the occupancy of work outside the simulator (other processes)."""
        self.advance(now)
        self._background = max(0.0, occupancy)

    @property
    def background(self) -> float:
        """The occupancy of work outside the simulator."""
        return self._background

    def begin(self, now: float, work_seconds: float, occupancy: float) -> Kernel:
        """Starts a kernel needing ``work_seconds`` at full speed."""
        self.advance(now)
        kernel = Kernel(self._virtual + work_seconds, next(self._sequence), occupancy)
        heapq.heappush(self._running, kernel)
        self._running_occupancy += occupancy
        return kernel

    def abort(self, now: float, kernel: Kernel) -> None:
        """Removes a kernel that will not finish (its task was cancelled)."""
        if kernel.active:
            self.advance(now)
            kernel.active = False
            self._running_occupancy = max(0.0, self._running_occupancy - kernel.occupancy)

    def next_finish(self) -> float | None:
        """Real time at which the next kernel finishes at the current rate."""
        while self._running and not self._running[0].active:
            heapq.heappop(self._running)
        if not self._running:
            return None
        remaining = max(0.0, self._running[0].finish_virtual - self._virtual)
        return self._last + remaining / self.rate

    def pop_finished(self, now: float) -> list[Kernel]:
        """Removes and returns every kernel whose work is done by ``now``."""
        self.advance(now)
        finished = []
        while self._running and (
            not self._running[0].active
            or self._running[0].finish_virtual <= self._virtual + _FINISH_TOLERANCE_S
        ):
            kernel = heapq.heappop(self._running)
            if kernel.active:
                kernel.active = False
                self._running_occupancy = max(0.0, self._running_occupancy - kernel.occupancy)
                finished.append(kernel)
        if not any(kernel.active for kernel in self._running):
            self._running_occupancy = 0.0  # clear float residue once idle
        return finished

    # -- memory ---------------------------------------------------------------------

    @property
    def memory_used(self) -> int:
        """Base reservation plus every allocation."""
        return self.spec.memory_base + sum(self._allocations.values())

    def allocate(self, owner: str, size: int) -> None:
        """Sets ``owner``'s allocation to ``size`` bytes (0 releases it).

        Raises:
            OutOfGpuMemoryError: the new total would exceed the GPU's memory.
        """
        current = self._allocations.get(owner, 0)
        if size > current and self.memory_used - current + size > self.spec.memory_total:
            raise OutOfGpuMemoryError(
                f"out of memory on {self.spec.uuid}: {owner} needs {size} bytes, "
                f"{self.spec.memory_total - self.memory_used + current} available"
            )
        if size > 0:
            self._allocations[owner] = size
        else:
            self._allocations.pop(owner, None)

    # -- readings ---------------------------------------------------------------------

    def sample(self, now: float) -> GpuSample:
        """Closes a metrics interval: utilisation over it, power, cumulative energy."""
        self.advance(now)
        elapsed = now - self._sample_at
        busy = self._busy_seconds - self._sample_busy
        if elapsed > 0:
            self._last_utilization = min(1.0, busy / elapsed)
            idle, limit = self.spec.power_idle_watts, self.spec.power_limit_watts
            self._energy += idle * elapsed + (limit - idle) * busy
        self._sample_at, self._sample_busy = now, self._busy_seconds
        return self.last_sample()

    def last_sample(self) -> GpuSample:
        """The readings of the last closed interval, without closing a new one."""
        idle, limit = self.spec.power_idle_watts, self.spec.power_limit_watts
        return GpuSample(
            utilization=self._last_utilization,
            power_watts=idle + (limit - idle) * self._last_utilization,
            energy_joules=self._energy,
            memory_used_bytes=self.memory_used,
        )

    def reset_counters(self, now: float) -> None:
        """Zeroes energy and the interval readings, as a server restart does."""
        self.advance(now)
        self._energy = 0.0
        self._last_utilization = 0.0
        self._sample_at, self._sample_busy = now, self._busy_seconds


class GpuScheduler:
    """Runs kernels on a ``SharedGpu`` in real time from one asyncio loop."""

    def __init__(self, gpu: SharedGpu, loop: asyncio.AbstractEventLoop) -> None:
        self.gpu = gpu
        self._loop = loop
        self._timer: asyncio.TimerHandle | None = None

    async def run(self, work_seconds: float, occupancy: float) -> None:
        """Executes one kernel; returns when the shared GPU has done its work."""
        if work_seconds <= 0:
            return
        kernel = self.gpu.begin(self._loop.time(), work_seconds, occupancy)
        kernel.done = self._loop.create_future()
        self._reschedule()
        try:
            await kernel.done
        finally:
            if kernel.active:
                self.gpu.abort(self._loop.time(), kernel)
                self._reschedule()

    def set_background(self, occupancy: float) -> None:
        """Changes background occupancy; running kernels speed up or slow down."""
        self.gpu.set_background(self._loop.time(), occupancy)
        self._reschedule()

    def _reschedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        when = self.gpu.next_finish()
        if when is not None:
            self._timer = self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        for kernel in self.gpu.pop_finished(self._loop.time()):
            if kernel.done is not None and not kernel.done.done():
                kernel.done.set_result(None)
        self._reschedule()
