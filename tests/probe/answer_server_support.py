"""A loopback KServe v2 server whose infer answers a test writes byte by byte, and a
runner that drives one real :class:`ModelCanary` (prepare, tensor format, sends) at it
from the real engine: for the library-path and the answer-limit tests.

Metadata, config and ``GET /v2`` are answered plainly; each infer request goes to the
test's ``infer`` behaviour, which writes whatever it likes on the socket (a valid
answer, a broken one, a gibibyte) and returns False to close the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from engine_support import RawServer, read_request
from structlog.testing import capture_logs

from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.inference_client import InferenceClient
from tritonwatch.probe.canary.model_canary import ModelCanary
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.state.canary_board import CanaryBoard

METADATA = {
    "name": "m",
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2]}],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 2]}],
}
ANSWER_JSON = json.dumps(
    {
        "model_name": "m",
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 2], "data": [1.5, 2.5]}],
    }
).encode()
PLAN = CanaryPlan("t", "m", "", "http", "", "", 20.0, False, 2.0, 1, "zero")


def http_answer(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    """A whole HTTP/1.1 answer with ``body`` and its Content-Length."""
    head = [f"HTTP/1.1 {status}", "Content-Type: application/json",
            f"Content-Length: {len(body)}", *headers]  # fmt: skip
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


Infer = Callable[[socket.socket, bytes], bool]
"""Writes the answer to one infer request; False: close the connection after it."""


def answer_with(data: bytes) -> Infer:
    def infer(conn: socket.socket, _request: bytes) -> bool:
        conn.sendall(data)
        return True

    return infer


@dataclass
class AnswerServer:
    """The loopback server: plain API answers, ``infer`` for every infer request."""

    infer: Infer
    infers: int = 0
    """Infer requests read, whoever sent them (the engine, the library path)."""
    sent_bytes: int = 0
    """What an ``infer`` behaviour that counts (see :func:`flood`) wrote."""
    closed_by_peer: threading.Event = field(default_factory=threading.Event)
    """An infer behaviour found the connection closed by the canary mid-answer."""
    _raw: RawServer | None = None

    def __post_init__(self) -> None:
        self._raw = RawServer(self._serve)
        self.port = self._raw.port
        self.url = f"http://127.0.0.1:{self.port}"

    def _serve(self, conn: socket.socket, _server: RawServer) -> None:
        buffer = bytearray()
        while (request := read_request(conn, buffer)) is not None:
            line = request.split(b"\r\n", 1)[0].decode()
            method, path, _ = line.split(" ", 2)
            if method == "POST" and path.endswith("/infer"):
                self.infers += 1
                if not self.infer(conn, request):
                    return
            elif path == "/v2":
                conn.sendall(http_answer(json.dumps({"extensions": []}).encode()))
            elif path.endswith("/config"):
                # A plain KServe v2 server's 404 (FastAPI's body, no Triton error):
                # it has no config API.
                conn.sendall(http_answer(b'{"detail": "Not Found"}', status="404 Not Found"))
            else:
                conn.sendall(http_answer(json.dumps(METADATA).encode()))

    def close(self) -> None:
        assert self._raw is not None
        self._raw.close()


@contextlib.contextmanager
def answer_server(infer: Infer) -> Iterator[AnswerServer]:
    server = AnswerServer(infer)
    try:
        yield server
    finally:
        server.close()


def flood(server_ref: list[AnswerServer], head: bytes, piece: bytes, total: int) -> Infer:
    """Writes ``head``, then ``piece`` over and over up to ``total`` bytes, counting
    what went out; stops when the canary closes the connection (which it must)."""

    def infer(conn: socket.socket, _request: bytes) -> bool:
        server = server_ref[0]
        try:
            conn.sendall(head)
            while server.sent_bytes < total:
                conn.sendall(piece)
                server.sent_bytes += len(piece)
        except OSError:
            server.closed_by_peer.set()
        return False

    return infer


@dataclass
class Run:
    """What one canary run left: its statistics, log lines and the engine's sends."""

    stats: CanaryBoard
    logs: list[dict[str, Any]]
    canary: ModelCanary
    engine_sent: int

    def outcomes(self) -> dict[str, int]:
        return dict(self.stats.snapshot(0)[0].outcomes)


def run_canary(
    plan: CanaryPlan,
    client: InferenceClient,
    until: Callable[[CanaryBoard, CanaryEngine], bool],
    *,
    timeout: float = 60.0,
) -> Run:
    """Runs ``plan``'s canary (as the runner does) from a real engine until ``until``
    holds (checked every 10 ms; ``timeout`` only guards against a hang)."""
    engine = CanaryEngine()
    stats = CanaryBoard()
    stats.declare([plan.key])
    canaries: list[ModelCanary] = []

    async def body() -> None:
        canary = ModelCanary(plan, client, stats, engine=engine)
        canaries.append(canary)
        task = asyncio.create_task(canary.run())
        deadline = time.monotonic() + timeout
        try:
            while not until(stats, engine):
                assert time.monotonic() < deadline, f"not reached: {stats.snapshot(0)}"
                assert not task.done(), task
                await asyncio.sleep(0.01)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()

    with capture_logs() as logs:
        try:
            asyncio.run(body())
        finally:
            engine.stop()
    return Run(stats, logs, canaries[0], engine.sent)


def outcome_count(stats: CanaryBoard, outcome: str) -> int:
    return int(stats.snapshot(0)[0].outcomes.get(outcome, 0))


def http_plan(server: AnswerServer, **changes: Any) -> CanaryPlan:
    return replace(PLAN, http_url=server.url, **changes)
