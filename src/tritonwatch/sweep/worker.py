"""The load worker: keeps requests flowing and hands over measurement windows on demand.

The same :class:`LoadWorker` runs in the sweep's own process (a thread with an event
loop) or in child processes when one process cannot generate enough load. Either
way the coordinator calls :meth:`cut` at each window boundary and receives every
latency sample of the window, so merging windows from several processes is exact.

Requests go out on the wire code, in clear or over TLS: HTTP on
:class:`~tritonwatch.wire.http1.Http1Connection`, gRPC on
:class:`~tritonwatch.sweep.h2.H2Connection`. Only a gRPC request too large for a
fresh HTTP/2 connection's window goes through ``grpc``
(:mod:`~tritonwatch.sweep.grpc_callbacks`).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from array import array
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from tritonwatch.sweep.grpc_callbacks import CallbackGrpcLoad
from tritonwatch.sweep.h2 import H2Connection, h2_request
from tritonwatch.sweep.spec import LoadSpec, arrival_gaps
from tritonwatch.wire.http1 import Http1Connection
from tritonwatch.wire.http2 import UnaryRequest

Send = Callable[[], Awaitable[bool]]
Sender = tuple[Send, Callable[[], None]]
"""A client: its send function and its closer."""


@dataclass(slots=True)
class WindowSamples:
    """One measurement window of one worker (or several, merged)."""

    latencies: array[float] = field(default_factory=lambda: array("d"))
    errors: int = 0
    timeouts: int = 0
    cpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    workers: int = 1

    def merge(self, other: WindowSamples) -> WindowSamples:
        """Both windows as one: samples concatenated, CPU added, wall the longest."""
        return WindowSamples(
            self.latencies + other.latencies,
            self.errors + other.errors,
            self.timeouts + other.timeouts,
            self.cpu_seconds + other.cpu_seconds,
            max(self.wall_seconds, other.wall_seconds),
            self.workers + other.workers,
        )


class Worker(Protocol):
    """A sweep's load worker, in this process or a child (:mod:`~tritonwatch.sweep.pool`)."""

    def cut(self) -> WindowSamples: ...

    def stop(self) -> None: ...


def uses_library(spec: LoadSpec) -> bool:
    """Whether this worker's requests go through ``grpc``
    (:mod:`~tritonwatch.sweep.grpc_callbacks`): gRPC requests the wire code cannot
    send (over a fresh connection's 64 KiB window). All else runs on the wire code."""
    return spec.protocol == "grpc" and h2_request(spec) is None


class LoadWorker:
    """Generates the load of one :class:`LoadSpec` on the running event loop."""

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        self._window = WindowSamples()
        self._window_started = time.perf_counter()
        self._cpu_at_cut = time.process_time()
        self._tasks: list[asyncio.Task[None]] = []
        self._lock = threading.Lock()
        """Guards the window: gRPC's callback thread records while the loop cuts."""
        self._h2_request = h2_request(spec)
        """The gRPC call's frames, built once, when the wire code sends it."""
        library = spec.protocol == "grpc" and self._h2_request is None
        self._library = CallbackGrpcLoad(spec, self._record_callback) if library else None
        """What the wire code cannot send goes through ``grpc`` (:func:`uses_library`)."""
        alpn = ("h2",) if spec.protocol == "grpc" else ()
        self._ssl = spec.tls.ssl_context(alpn) if spec.tls is not None else None
        """One context for all of this worker's TLS connections (loading CAs is slow)."""

    def cut(self) -> WindowSamples:
        """Closes the current window and starts the next one."""
        with self._lock:
            now, cpu = time.perf_counter(), time.process_time()
            window, self._window = self._window, WindowSamples()
            started, cpu_before = self._window_started, self._cpu_at_cut
            self._window_started, self._cpu_at_cut = now, cpu
        window.wall_seconds = now - started
        window.cpu_seconds = cpu - cpu_before
        return window

    async def start(self) -> None:
        spec = self.spec
        if spec.mode == "concurrency" and self._library is not None:
            self._library.start()  # the closed loop runs on gRPC's callbacks
        elif spec.mode == "concurrency":
            self._tasks = [
                asyncio.create_task(self._closed_loop()) for _ in range(spec.concurrency)
            ]
        else:
            slots = asyncio.Semaphore(spec.concurrency)
            self._tasks = [asyncio.create_task(self._open_loop(slots))]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._library is not None:
            library = self._library
            await asyncio.get_running_loop().run_in_executor(None, library.stop, self.spec.timeout)

    async def _sender(self) -> Sender:
        """A send function and a closer, for one logical client of this worker."""
        spec = self.spec
        if self._library is not None:
            return self._library.send, lambda: None  # one channel, shared
        if self._h2_request is not None:
            return await self._h2_sender(self._h2_request)
        connection = await Http1Connection.open(spec.host, spec.port, self._ssl)

        async def send_http() -> bool:
            status, _ = await connection.request(spec.payload)
            return status == 200

        return send_http, connection.close

    async def _h2_sender(self, request: UnaryRequest) -> Sender:
        """A client on its own HTTP/2 connection; one the server spent (GOAWAY, closed
        while idle) is replaced before the next call rather than counted as a failure."""
        spec = self.spec
        connection = [await H2Connection.open(spec.host, spec.port, self._ssl)]

        async def send_h2() -> bool:
            if not connection[0].can_call(request):
                connection[0].close()
                connection[0] = await H2Connection.open(spec.host, spec.port, self._ssl)
            reply = await connection[0].call(request)
            return reply.status == 0

        def close_current() -> None:
            connection[0].close()  # the one in use now, not the first

        return send_h2, close_current

    async def _closed_loop(self) -> None:
        """One of ``concurrency`` clients, each with one request always in flight."""
        timeout = self.spec.timeout
        while True:
            try:
                send, close = await self._sender()
            except OSError:
                self._window.errors += 1
                await asyncio.sleep(0.1)
                continue
            try:
                while True:
                    started = time.perf_counter()
                    async with asyncio.timeout(timeout):  # wait_for can swallow cancels
                        ok = await send()
                    self._record(ok, time.perf_counter() - started)
            except TimeoutError:
                self._window.timeouts += 1
            except Exception:  # a failed request: count it, reconnect, go on
                self._window.errors += 1
            finally:
                close()

    async def _open_loop(self, slots: asyncio.Semaphore) -> None:
        """Sends ``rate`` per second on schedule (evenly or as Poisson arrivals); latency
        counts from the intended time."""
        loop = asyncio.get_running_loop()
        senders: asyncio.Queue[Sender | None] = asyncio.Queue()
        for _ in range(self.spec.concurrency):
            try:
                senders.put_nowait(await self._sender())
            except OSError:
                senders.put_nowait(None)  # its first request tries again, or counts
        gaps = arrival_gaps(self.spec.rate, self.spec.arrivals, random.Random())  # noqa: S311
        next_send = loop.time()
        pending: set[asyncio.Task[None]] = set()
        try:
            while True:
                await asyncio.sleep(max(0.0, next_send - loop.time()))
                task = asyncio.create_task(self._scheduled(next_send, slots, senders))
                pending.add(task)
                task.add_done_callback(pending.discard)
                next_send += next(gaps)
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            while not senders.empty():
                if (left := senders.get_nowait()) is not None:
                    left[1]()

    async def _scheduled(
        self, intended: float, slots: asyncio.Semaphore, senders: asyncio.Queue[Sender | None]
    ) -> None:
        """One request of the open loop, on a free client (None in the queue: a client
        whose request failed or timed out, reconnected here)."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(intended + self.spec.timeout), slots:
                sender = await senders.get()
                try:
                    sender = sender or await self._sender()
                    ok = await sender[0]()
                except BaseException:  # failed, timed out or stopped: not used again
                    if sender is not None:
                        sender[1]()
                    senders.put_nowait(None)
                    raise
                senders.put_nowait(sender)
            self._record(ok, loop.time() - intended)
        except TimeoutError:
            self._window.timeouts += 1
        except Exception:  # counted, never raised: the load goes on
            self._window.errors += 1

    def _record(self, ok: bool, latency: float) -> None:
        with self._lock:
            if ok:
                self._window.latencies.append(latency)
            else:
                self._window.errors += 1

    def _record_callback(self, latency: float | None, timed_out: bool) -> None:
        with self._lock:
            if latency is not None:
                self._window.latencies.append(latency)
            elif timed_out:
                self._window.timeouts += 1
            else:
                self._window.errors += 1
