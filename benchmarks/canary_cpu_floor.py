"""The CPU floor of a Python canary: the least any Python process pays for 20 requests/s.

The footprint goal (issue 15) asks ≤ 1 % of a core for 1 target × 20 models at default
intervals, where the canary sends one request per model per second. Where does the
daemon's CPU go, and how much of it could any Python canary avoid? This benchmark
answers the second question by measurement: beside the daemon, on the same real
``tritonserver`` and the same 20 models, it runs the leanest canary a Python process
can be — :func:`floor_client`, one thread, one keep-alive socket per model, the
request's bytes built once, ``select()`` with a microsecond timeout until the next
send or answer, the answer read to its ``Content-Length`` and its latency appended to a
list. Nothing else: no asyncio, no decoding, no SLO store, no exporter, no scrapes, no
logging. It wakes twice per request (the send time, the answer), as every open-loop
canary must unless it sends several models' requests together, which would make them
queue behind each other on the server and measure that instead.

Both run for ``--duration`` seconds, one after the other, ``--repeats`` times
interleaved; CPU is utime + stime from /proc/PID/stat over the measured seconds, in
percent of one core. The ratio daemon / floor says how much of the daemon's canary cost
is ours to remove; the floor itself says what a Python canary costs on this host (on
the two-core test VM a thread's wake-up costs 70–100 µs of CPU, so 40 wake-ups a second
are already 0.3–0.4 % of a core before a byte is sent).

    python benchmarks/canary_cpu_floor.py [--duration 60] [--repeats 2] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import random
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from footprint import daemon_config, target_server
from harness import footprint, read_proc

from support import DaemonProcess
from tritonwatch.common import precise_loop
from tritonwatch.wire.http1 import Http1Connection

WARM_UP_S = 10.0
RATE_PER_MODEL = 1.0


def infer_request(host: str, model: str) -> bytes:
    """A keep-alive JSON infer for the batching model's one FP32[16] input, batch 1."""
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [0.0] * 16}]}
    ).encode()
    head = (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {host}\r\n"
        f"Connection: keep-alive\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


def _complete(buffer: bytes) -> bool:
    """Whether ``buffer`` holds a whole answer (Triton always sends Content-Length)."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return False
    for line in buffer[:end].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(buffer) - end - 4 >= int(value)
    return False


def floor_client(http_url: str, models: list[str], duration: float, rate: float) -> list[float]:
    """Open-loop requests to every model at ``rate`` per second each for ``duration``
    seconds; the latencies (seconds, from the intended send time) of those answered."""
    host_port = http_url.removeprefix("http://").rstrip("/")
    host, _, port = host_port.partition(":")
    sockets, requests_, buffers, sent_at = {}, {}, {}, {}
    for model in models:
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        sockets[model], requests_[model], buffers[model] = (
            sock,
            infer_request(host_port, model),
            b"",
        )
    by_fd = {sock.fileno(): model for model, sock in sockets.items()}
    start = time.monotonic()
    due = [(start + random.uniform(0, 1 / rate), model) for model in models]
    heapq.heapify(due)
    latencies: list[float] = []
    end = start + duration
    while True:
        now = time.monotonic()
        while due and due[0][0] <= now:
            intended, model = heapq.heappop(due)
            if model not in sent_at:  # never two in flight on one connection
                sockets[model].send(requests_[model])
                sent_at[model] = intended
            heapq.heappush(due, (intended + 1 / rate, model))
        if now >= end:
            break
        waiting = [sockets[model] for model in sent_at]
        readable, _, _ = select.select(waiting, [], [], max(0.0, min(due[0][0], end) - now))
        for sock in readable:
            model = by_fd[sock.fileno()]
            buffers[model] += sock.recv(65536)
            if _complete(buffers[model]):
                latencies.append(time.monotonic() - sent_at.pop(model))
                buffers[model] = b""
    for sock in sockets.values():
        sock.close()
    return latencies


class _AnswerReader(Http1Connection):
    """:class:`Http1Connection` that calls back with each whole answer (no future)."""

    def __init__(self) -> None:
        super().__init__()
        self.on_answer: Callable[[], None] | None = None

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if self.on_answer is not None and self._parse() is not None:
            on_answer, self.on_answer = self.on_answer, None
            on_answer()


def asyncio_floor_client(
    http_url: str, models: list[str], duration: float, rate: float
) -> list[float]:
    """:func:`floor_client` on the canary's event loop (microsecond timers), written as
    bare callbacks: a timer handle per send, the answer read in ``data_received``. No
    task, future, timeout or semaphore per request: the least an asyncio canary pays."""

    async def run() -> list[float]:
        loop = asyncio.get_running_loop()
        host_port = http_url.removeprefix("http://").rstrip("/")
        host, _, port = host_port.partition(":")
        latencies: list[float] = []

        def fire(connection: _AnswerReader, request: bytes, intended: float) -> None:
            if connection.on_answer is None:  # never two in flight on one connection
                connection.on_answer = lambda: latencies.append(loop.time() - intended)
                assert connection._transport is not None
                connection._transport.write(request)
            loop.call_at(intended + 1 / rate, fire, connection, request, intended + 1 / rate)

        for model in models:
            _, connection = await loop.create_connection(_AnswerReader, host, int(port))
            first = loop.time() + random.uniform(0, 1 / rate)
            loop.call_at(first, fire, connection, infer_request(host_port, model), first)
        await asyncio.sleep(duration)
        return latencies

    return precise_loop.run(run())


@dataclass(frozen=True)
class FloorRun:
    kind: str
    cpu_percent: float
    answered: int


def _measure_pid(pid: int, duration: float) -> float:
    first = read_proc(pid)
    time.sleep(duration)
    return footprint([first, read_proc(pid)]).cpu_percent


def run_floor(http_url: str, models: list[str], duration: float, kind: str = "floor") -> FloorRun:
    """One of the two floor clients (``floor``, ``asyncio_floor``) in its own process."""
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); "
        f"from canary_cpu_floor import {kind}_client as client; "
        "print(len(client(sys.argv[2], sys.argv[3].split(','), "
        f"{WARM_UP_S + duration + 2}, {RATE_PER_MODEL})))"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(Path(__file__).parent), http_url, ",".join(models)],
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(WARM_UP_S)
    cpu = _measure_pid(process.pid, duration)
    out, _ = process.communicate(timeout=60)
    return FloorRun(kind, cpu, int(out.strip() or 0))


def run_daemon(config: Path, duration: float, kind: str = "daemon") -> FloorRun:
    daemon = DaemonProcess(config)
    try:
        time.sleep(WARM_UP_S)
        return FloorRun(kind, _measure_pid(daemon.process.pid, duration), -1)
    finally:
        daemon.stop()


KINDS = {
    "floor": "leanest Python canary (select loop)",
    "asyncio_floor": "leanest asyncio canary (bare callbacks)",
    "daemon": "tritonwatch run (canary, scrapes, SLOs)",
    "no_canary": "tritonwatch run, canary off",
}
"""What each run is, in the order one repeat runs them."""


def measure(duration: float = 60.0, repeats: int = 2) -> dict[str, list[FloorRun]]:
    """``repeats`` interleaved rounds of every :data:`KINDS` on one real Triton."""
    runs: dict[str, list[FloorRun]] = {kind: [] for kind in KINDS}
    with (
        tempfile.TemporaryDirectory() as tmp,
        target_server("triton", Path(tmp)) as (
            http_url,
            metrics_url,
            names,
        ),
    ):
        config = Path(tmp) / "daemon.yaml"
        config.write_text(daemon_config(http_url, metrics_url, names))
        quiet = Path(tmp) / "no-canary.yaml"
        quiet.write_text(daemon_config(http_url, metrics_url, names) + "canary: {enabled: false}\n")
        for _ in range(repeats):
            runs["floor"].append(run_floor(http_url, names, duration))
            runs["asyncio_floor"].append(run_floor(http_url, names, duration, "asyncio_floor"))
            runs["daemon"].append(run_daemon(config, duration))
            runs["no_canary"].append(run_daemon(quiet, duration, "no_canary"))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="20 s, one repeat")
    args = parser.parse_args()
    duration, repeats = (20.0, 1) if args.quick else (args.duration, args.repeats)
    runs = measure(duration, repeats)
    print(f"20 models at {RATE_PER_MODEL:g}/s each, {duration:g} s × {repeats}; CPU, % of a core")
    for kind, label in KINDS.items():
        cpu = [run.cpu_percent for run in runs[kind]]
        print(f"{label:44} median {statistics.median(cpu):5.2f}  [{min(cpu):.2f}–{max(cpu):.2f}]")


if __name__ == "__main__":
    main()
