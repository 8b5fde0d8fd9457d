"""gRPC load the wire code cannot send (a request over a fresh HTTP/2 connection's 64
KiB window, :mod:`~tritonwatch.sweep.h2`), on a synchronous ``grpc`` channel.

Closed loop runs as perf_analyzer's C++ client does: each of the ``concurrency`` clients
is a chain of ``future()`` calls whose completion callback, on gRPC's own thread, takes
the time and sends the next request at once. (``grpc.aio`` hands every answer from
gRPC's poller thread to the event loop: a wake-up and a GIL hand-over on the critical
path of every request, docs/guides/sweep.md.) Open loop keeps its schedule on the
worker's event loop and sends each request with :meth:`CallbackGrpcLoad.send`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from tritonwatch.common.kserve import GRPC_MODEL_INFER
from tritonwatch.sweep.spec import LoadSpec

RETRY_DELAY_SECONDS = 0.1
"""After a failed request, before the next: a dead server is not hammered."""

Record = Callable[[float | None, bool], None]
"""(latency in seconds or None on failure, timed out)."""


class CallbackGrpcLoad:
    """One ``grpc`` channel to the target: :meth:`start` keeps ``spec.concurrency``
    requests in flight, each resent from its callback; :meth:`send` sends one request
    for an event loop's schedule."""

    def __init__(self, spec: LoadSpec, record: Record) -> None:
        import grpc  # noqa: PLC0415 - heavy; load on use

        self._grpc = grpc
        self._spec = spec
        self._record = record
        target = f"{spec.host}:{spec.port}"
        options = [("grpc.max_receive_message_length", 2**31 - 1)]
        if spec.tls is not None:
            self._channel = grpc.secure_channel(target, spec.tls.grpc_credentials(), options)
        else:
            self._channel = grpc.insecure_channel(target, options)
        self._call: Any = self._channel.unary_unary(
            GRPC_MODEL_INFER, request_serializer=None, response_deserializer=None
        )  # raw bytes both ways: the answer is not decoded on the hot path
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._in_flight = 0
        self._idle = threading.Event()
        self._idle.set()
        self._timers: set[threading.Timer] = set()

    def start(self) -> None:
        """Starts the closed loop: every answer or failure goes to ``record``."""
        for _ in range(self._spec.concurrency):
            self._send()

    async def send(self) -> bool:
        """One request on the running loop's behalf: True once answered.

        Raises:
            grpc.RpcError: the call failed (its status says why).
            grpc.FutureCancelledError: the channel closed under it.
        """
        loop = asyncio.get_running_loop()
        answered: asyncio.Future[None] = loop.create_future()
        call = self._call.future(self._spec.payload, timeout=self._spec.timeout)
        call.add_done_callback(lambda _: _wake(loop, answered))
        try:
            await answered
        except asyncio.CancelledError:
            call.cancel()  # the schedule gave up on it (timed out, or the sweep stops)
            raise
        error = call.exception()
        if error is not None:
            raise error
        return True

    def _send(self) -> None:
        with self._lock:
            if self._stopping.is_set():
                return
            self._in_flight += 1
            self._idle.clear()
        started = time.perf_counter()
        future = self._call.future(self._spec.payload, timeout=self._spec.timeout)
        future.add_done_callback(lambda done: self._done(done, started))

    def _done(self, future: Any, started: float) -> None:
        latency = time.perf_counter() - started
        with self._lock:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()
        if self._stopping.is_set():
            return  # cancelled by the close, or finished after the last window
        try:
            error = future.exception()
        except self._grpc.FutureCancelledError:
            return
        if error is None:
            self._record(latency, False)
            self._send()
            return
        timed_out = error.code() == self._grpc.StatusCode.DEADLINE_EXCEEDED
        self._record(None, timed_out)
        self._later(self._send)

    def _later(self, action: Callable[[], None]) -> None:
        timer = threading.Timer(RETRY_DELAY_SECONDS, action)
        timer.daemon = True
        with self._lock:
            if self._stopping.is_set():
                return
            self._timers.add(timer)
        timer.start()

    def stop(self, timeout: float) -> None:
        """Stops sending, waits up to ``timeout`` for the closed loop's calls in flight,
        closes the channel (which cancels whatever is left)."""
        self._stopping.set()
        with self._lock:
            timers, self._timers = self._timers, set()
        for timer in timers:
            timer.cancel()
        self._idle.wait(timeout)
        self._channel.close()


def _wake(loop: asyncio.AbstractEventLoop, answered: asyncio.Future[None]) -> None:
    """Sets ``answered`` on ``loop``, from gRPC's thread; nothing once the loop is closed
    (a call the channel's close cancelled after the worker's loop ended)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_settle, answered)


def _settle(answered: asyncio.Future[None]) -> None:
    if not answered.done():  # (cancelled: the schedule gave up on it)
        answered.set_result(None)
