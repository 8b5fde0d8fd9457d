"""The load worker: keeps requests flowing and hands over measurement windows on demand.

The same :class:`LoadWorker` runs in the sweep's own process (a thread with an event
loop) or in child processes when one process cannot generate enough load. Either
way the coordinator calls :meth:`cut` at each window boundary and receives every
latency sample of the window, so merging windows from several processes is exact.
"""

from __future__ import annotations

import asyncio
import threading
import time
from array import array
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tritonwatch.common.kserve import GRPC_MODEL_INFER
from tritonwatch.probe.sweep.grpc_callbacks import CallbackGrpcLoad
from tritonwatch.probe.sweep.h2c import H2cConnection, lean_grpc_request
from tritonwatch.probe.sweep.spec import LoadSpec
from tritonwatch.wire.http1 import Http1Connection
from tritonwatch.wire.http2 import UnaryRequest

Send = Callable[[], Awaitable[bool]]
CALLBACK_MAX_CONCURRENCY = 4
"""gRPC that cannot run on :mod:`~tritonwatch.probe.sweep.h2c` (TLS, requests over 64
KiB): closed loop up to this many in flight per worker runs on completion callbacks,
one thread hand-over less per request, which at low concurrency sits on the critical
path of every request and kept ``grpc.aio`` well behind perf_analyzer's latency; above
it ``grpc.aio`` was as fast or faster, so it keeps the rest (docs/guides/sweep.md)."""


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
    """A sweep's load worker, in this process or a child (:mod:`~tritonwatch.probe.sweep.pool`)."""

    def cut(self) -> WindowSamples: ...

    def stop(self) -> None: ...


def uses_callbacks(spec: LoadSpec) -> bool:
    """Whether this worker's load runs on gRPC completion callbacks, not ``grpc.aio``
    (plaintext gRPC that fits the h2c client runs on that instead)."""
    return (
        spec.protocol == "grpc"
        and spec.mode == "concurrency"
        and spec.concurrency <= CALLBACK_MAX_CONCURRENCY
        and lean_grpc_request(spec) is None
    )


class LoadWorker:
    """Generates the load of one :class:`LoadSpec` on the running event loop."""

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        self._window = WindowSamples()
        self._window_started = time.perf_counter()
        self._cpu_at_cut = time.process_time()
        self._tasks: list[asyncio.Task[None]] = []
        self._callbacks: CallbackGrpcLoad | None = None
        self._lock = threading.Lock()
        """Guards the window: gRPC's callback thread records while the loop cuts."""
        self._channel: Any = None
        self._ssl = spec.tls.ssl_context() if spec.protocol == "http" and spec.tls else None
        """One context for all of this worker's HTTPS connections (loading CAs is slow)."""
        self._h2c_request = lean_grpc_request(spec)
        """The gRPC call's frames, built once, when it runs on the h2c client."""

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
        slots = asyncio.Semaphore(spec.concurrency)
        if uses_callbacks(spec):
            self._callbacks = CallbackGrpcLoad(spec, self._record_callback)
            self._callbacks.start()
        elif spec.mode == "concurrency":
            self._tasks = [
                asyncio.create_task(self._closed_loop()) for _ in range(spec.concurrency)
            ]
        else:
            self._tasks = [asyncio.create_task(self._open_loop(slots))]

    async def stop(self) -> None:
        if self._callbacks is not None:
            callbacks = self._callbacks
            await asyncio.get_running_loop().run_in_executor(
                None, callbacks.stop, self.spec.timeout
            )
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._channel is not None:
            await self._channel.close()

    async def _sender(self) -> tuple[Send, Callable[[], None]]:
        """A send function and a closer, for one logical client of this worker."""
        spec = self.spec
        if spec.protocol == "http":
            connection = await Http1Connection.open(spec.host, spec.port, self._ssl)

            async def send_http() -> bool:
                status, _ = await connection.request(spec.payload)
                return status == 200

            return send_http, connection.close
        if self._h2c_request is not None:
            return await self._h2c_sender(self._h2c_request)
        return await self._grpc_sender(), lambda: None

    async def _h2c_sender(self, request: UnaryRequest) -> tuple[Send, Callable[[], None]]:
        """A client on its own h2c connection; one the server spent (GOAWAY, closed while
        idle) is replaced before the next call rather than counted as a failure."""
        spec = self.spec
        connection = [await H2cConnection.open(spec.host, spec.port)]

        async def send_h2c() -> bool:
            if not connection[0].can_call(request):
                connection[0].close()
                connection[0] = await H2cConnection.open(spec.host, spec.port)
            reply = await connection[0].call(request)
            return reply.status == 0

        def close_current() -> None:
            connection[0].close()  # the one in use now, not the first

        return send_h2c, close_current

    async def _grpc_sender(self) -> Send:
        import grpc  # noqa: PLC0415 - heavy; load on use
        from tritonclient.grpc import service_pb2  # noqa: PLC0415

        spec = self.spec
        if self._channel is None:
            target = f"{spec.host}:{spec.port}"
            options = [("grpc.max_receive_message_length", 2**31 - 1)]
            if spec.tls is not None:
                self._channel = grpc.aio.secure_channel(
                    target, spec.tls.grpc_credentials(), options
                )
            else:
                self._channel = grpc.aio.insecure_channel(target, options)
        call = self._channel.unary_unary(
            GRPC_MODEL_INFER,
            request_serializer=None,  # the payload is already serialized
            response_deserializer=service_pb2.ModelInferResponse.FromString,
        )

        async def send_grpc() -> bool:
            await call(spec.payload, timeout=spec.timeout)
            return True

        return send_grpc

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
        """Sends ``rate`` per second on schedule; latency counts from the intended time."""
        loop = asyncio.get_running_loop()
        senders: asyncio.Queue[tuple[Send, Callable[[], None]]] = asyncio.Queue()
        for _ in range(self.spec.concurrency):
            senders.put_nowait(await self._sender())
        gap = 1.0 / self.spec.rate
        next_send = loop.time()
        pending: set[asyncio.Task[None]] = set()
        try:
            while True:
                await asyncio.sleep(max(0.0, next_send - loop.time()))
                task = asyncio.create_task(self._scheduled(next_send, slots, senders))
                pending.add(task)
                task.add_done_callback(pending.discard)
                next_send += gap
        finally:
            for task in pending:
                task.cancel()

    async def _scheduled(
        self,
        intended: float,
        slots: asyncio.Semaphore,
        senders: asyncio.Queue[tuple[Send, Callable[[], None]]],
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(intended + self.spec.timeout), slots:
                send, close = await senders.get()
                try:
                    ok = await send()
                    senders.put_nowait((send, close))
                except Exception:
                    close()
                    senders.put_nowait(await self._sender())
                    raise
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
