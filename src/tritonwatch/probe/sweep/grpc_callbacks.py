"""Closed-loop gRPC load on completion callbacks, the way perf_analyzer drives it.

``grpc.aio`` hands every completed call from gRPC's poller thread to the event loop
thread (a wake-up and a GIL hand-over per request). At low concurrency that hand-over
sits on the critical path of every request, and where the client shares its cores with
Triton it was a sizeable share of a fast model's round trip (docs/guides/sweep.md; the
sweep against perf_analyzer is benchmarks/RESULTS.md, §8). Here each of the
``concurrency`` clients is a chain of ``future()`` calls on a synchronous channel:
gRPC's own thread runs the completion callback, which takes the time and sends the
next request at once, as perf_analyzer's C++ callbacks do.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from tritonwatch.common.kserve import GRPC_MODEL_INFER
from tritonwatch.probe.sweep.spec import LoadSpec

RETRY_DELAY_SECONDS = 0.1
"""After a failed request, before the next: a dead server is not hammered."""

Record = Callable[[float | None, bool], None]
"""(latency in seconds or None on failure, timed out)."""


class CallbackGrpcLoad:
    """``spec.concurrency`` requests always in flight, each resent from its callback."""

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
        for _ in range(self._spec.concurrency):
            self._send()

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
        """Stops sending, waits up to ``timeout`` for the calls in flight, closes."""
        self._stopping.set()
        with self._lock:
            timers, self._timers = self._timers, set()
        for timer in timers:
            timer.cancel()
        self._idle.wait(timeout)
        self._channel.close()
