"""Raw loopback servers and a stand-in canary for the engine's tests.

The servers misbehave on cue (each connection runs a behaviour in a thread); the canary
only writes down what the engine tells it, so a test checks the engine's own contract.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from tritonwatch.probe.canary import engine as engine_module
from tritonwatch.probe.canary import engine_sockets
from tritonwatch.probe.canary.arrival_stamps import SO_TIMESTAMPNS, receive_stamped
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.engine_wires import RawAnswer

REQUEST = (
    b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n"
    b"Content-Length: 4\r\n\r\nbody"
)
OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


async def until(done: Callable[[], bool], what: str, limit: float = 10.0) -> None:
    """Waits (real time, up to ``limit`` s) until ``done``; fails naming ``what``."""
    deadline = time.monotonic() + limit
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit}s waiting for {what}")
        await asyncio.sleep(0.002)


def read_frame(conn: socket.socket, buffer: bytearray) -> tuple[int, int, int, bytes] | None:
    """One whole HTTP/2 frame (type, flags, stream, payload) from ``conn``; None at EOF."""
    while len(buffer) < 9 or len(buffer) < 9 + int.from_bytes(buffer[:3], "big"):
        data = conn.recv(65536)
        if not data:
            return None
        buffer += data
    length = int.from_bytes(buffer[:3], "big")
    kind, flags, stream = buffer[3], buffer[4], int.from_bytes(buffer[5:9], "big")
    payload = bytes(buffer[9 : 9 + length])
    del buffer[: 9 + length]
    return kind, flags, stream, payload


def read_request(conn: socket.socket, buffer: bytearray) -> bytes | None:
    """One whole request from ``conn`` (None at EOF), leaving the rest in ``buffer``."""
    while True:
        end = buffer.find(b"\r\n\r\n")
        if end >= 0:
            head = bytes(buffer[:end]).decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(buffer) >= end + 4 + length:
                request = bytes(buffer[: end + 4 + length])
                del buffer[: end + 4 + length]
                return request
        data = conn.recv(65536)
        if not data:
            return None
        buffer += data


Behaviour = Callable[[socket.socket, "RawServer"], None]


@dataclass
class RawServer:
    """Accepts on a loopback port; each connection runs ``behaviour`` in a thread."""

    behaviour: Behaviour
    connections: int = 0
    open_now: int = 0
    most_open: int = 0
    """The most connections open at once."""
    requests: list[bytes] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    """When each request was read whole (time.monotonic), where a behaviour notes it."""
    served: list[int] = field(default_factory=list)
    """Which connection (1, 2, … in the order accepted) each request came on, where a
    behaviour notes it."""
    closed: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._local = threading.local()
        threading.Thread(target=self._accept, daemon=True).start()

    def connection(self) -> int:
        """The number of the connection the calling behaviour serves."""
        return int(self._local.number)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            self.open_now += 1
            self.most_open = max(self.most_open, self.open_now)
            threading.Thread(target=self._serve, args=(conn, self.connections), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        self._local.number = number
        with conn, contextlib.suppress(OSError):
            self.behaviour(conn, self)
        self.open_now -= 1
        self.closed.set()

    def close(self) -> None:
        self._listener.close()


def answer_each(reply: bytes, delay: float = 0.0) -> Behaviour:
    """Keep-alive: every request gets ``reply`` after ``delay`` seconds."""

    def behaviour(conn: socket.socket, server: RawServer) -> None:
        buffer = bytearray()
        while (request := read_request(conn, buffer)) is not None:
            server.served.append(server.connection())
            server.requests.append(request)
            time.sleep(delay)
            conn.sendall(reply)

    return behaviour


@dataclass
class Recorder:
    """The stand-in canary: a fixed gap, optionally refusing sends, answers written down."""

    gap: float
    allow: bool = True
    answers: list[tuple[float, RawAnswer | BaseException]] = field(default_factory=list)
    asked: list[float] = field(default_factory=list)
    """Every send time the engine asked about while allowed (so: the requests sent)."""
    refused: int = 0
    woke: list[float] = field(default_factory=list)
    """When the engine took each answered request up, in the order of ``answers``."""

    def next_gap(self) -> float:
        return self.gap

    def may_send(self, intended: float) -> bool:
        if self.allow:
            self.asked.append(intended)
        else:
            self.refused += 1
        return self.allow

    def record(self, intended: float, answer: RawAnswer | BaseException, woke: float) -> None:
        assert woke >= intended  # the engine never takes a request up before its time
        self.answers.append((intended, answer))
        self.woke.append(woke)


@contextlib.contextmanager
def raw_server(behaviour: Behaviour) -> Iterator[RawServer]:
    """A :class:`RawServer` for the ``with`` block, its listener closed after."""
    server = RawServer(behaviour)
    try:
        yield server
    finally:
        server.close()


class SteppedClock:
    """The engine's clock, moved only by the test (``now``): a send is due exactly when
    the test moves the clock to it, however slow the host."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def wake(engine: CanaryEngine) -> None:
    """Ends the engine's current wait, so its next turn reads a clock the test moved."""
    waker = engine._waker
    if waker is not None:
        with contextlib.suppress(OSError):
            waker.wake()


@dataclass(order=True)
class _Reply:
    due: float
    order: int
    go: threading.Event = field(compare=False, default_factory=threading.Event)


class VirtualTime:
    """A clock for the engine that its own waits advance, with a server that answers on it.

    Installed as the engine's ``engine_sockets.wait_ready`` (:meth:`install`), it runs
    the engine as a
    discrete-event simulation: a wait first lets the loopback server catch up (every
    request the engine sent is read, every reply now due is written), then returns the
    sockets that are ready; when none is, virtual time jumps to the next thing due — a
    server reply (:meth:`answer_each`, ``delay`` virtual seconds after the request) or
    the end of the engine's own wait. Kernel arrival stamps read as the virtual time the
    reply was written. So every send time, answer time and wake-up of the engine is
    exact, whatever the host's load; only the server's threads run in real time, and
    the clock does not move while they work.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.started = False
        """Virtual time stands still until the test says every canary is on the engine."""
        self.until = math.inf
        """Virtual time stops here; the test then stops the engine."""
        self.reached = threading.Event()
        self.marks: dict[float, tuple[int, int]] = {}
        """The engine's (turns, sent) as virtual time passed each key (ask with ``mark``)."""
        self._hooks: list[tuple[float, Callable[[], None]]] = []
        self._lock = threading.Lock()
        self._replies: list[_Reply] = []
        self._order = itertools.count()
        self._released = 0
        self._written = 0
        self._read = 0
        self._stamps: dict[tuple[str, int], float] = {}
        self._engine: CanaryEngine | None = None

    def __call__(self) -> float:
        return self.now

    def at(self, when: float, hook: Callable[[], None]) -> None:
        """Runs ``hook`` in the engine's thread as virtual time reaches ``when``."""
        self._hooks.append((when, hook))

    def mark(self, when: float) -> None:
        self.marks[when] = (-1, -1)

    def install(self, engine: CanaryEngine, patch: pytest.MonkeyPatch) -> None:
        """Takes over ``engine``'s waits and arrival stamps for the test."""
        self._engine = engine
        patch.setattr(engine_sockets, "wait_ready", self._wait_ready)
        patch.setattr(engine_module, "receive_stamped", self._receive_stamped)

    def answer_each(self, reply: bytes, delay: float) -> Behaviour:
        """Keep-alive: every request gets ``reply`` ``delay`` virtual seconds after it came."""

        def behaviour(conn: socket.socket, server: RawServer) -> None:
            buffer, peer = bytearray(), conn.getpeername()
            while (request := read_request(conn, buffer)) is not None:
                with self._lock:  # the reply is due before the request counts as read
                    due = _Reply(self.now + delay, next(self._order))
                    heapq.heappush(self._replies, due)
                    server.served.append(server.connection())
                    server.requests.append(request)
                    self._read += 1
                due.go.wait(30)
                try:
                    with self._lock:
                        self._stamps[peer] = due.due
                    conn.sendall(reply)  # fails where the engine gave up and closed
                finally:
                    with self._lock:
                        self._written += 1

        return behaviour

    def _receive_stamped(self, sock: socket.socket, buffer: bytearray) -> tuple[int, float | None]:
        size, _ = receive_stamped(sock, buffer)
        # Stamped wherever the engine asked for stamps. (Not where the kernel gave one:
        # it turns stamping on a moment after the first socket asks, in a deferred work
        # item, so on a busy host a test's first answers can come unstamped.)
        if not sock.getsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS):
            return size, None
        with self._lock:
            return size, self._stamps[sock.getsockname()]

    def _settle(self) -> None:
        """Waits (real time) until the server has read what the engine sent, and written
        every reply released to it."""
        assert self._engine is not None
        limit = time.monotonic() + 30
        while True:
            with self._lock:
                if self._read >= self._engine.sent and self._written == self._released:
                    return
            if time.monotonic() > limit:
                raise AssertionError("the loopback server never caught up with the engine")
            time.sleep(0.0005)

    def _advance(self, to: float) -> None:
        assert self._engine is not None
        for when in sorted(self.marks):
            if self.now < when <= to:
                self.marks[when] = (self._engine.turns, self._engine.sent)
        for when, hook in sorted(self._hooks, key=lambda pair: pair[0]):
            if self.now < when <= to:
                hook()
        self.now = to

    def _wait_ready(
        self,
        readers: list[socket.socket],
        writers: list[socket.socket],
        timeout: float,
        fits: bool | None = None,
    ) -> tuple[list[socket.socket], list[socket.socket]]:
        if timeout <= 0:
            return _real_wait(readers, writers, 0.0)
        if not self.started or self.reached.is_set():
            return _real_wait(readers, writers, min(timeout, 0.01))
        if writers:  # connecting, or a request the socket did not take whole: real time
            return _real_wait(readers, writers, 10.0)
        wake_at = self.now + timeout
        while True:
            self._settle()
            ready = _real_wait(readers, writers, 0.0)
            if ready[0] or ready[1]:
                return ready
            with self._lock:
                reply = self._replies[0] if self._replies else None
                if reply is not None and reply.due <= min(wake_at, self.until):
                    heapq.heappop(self._replies)
                    self._released += 1
            if reply is not None and reply.due <= min(wake_at, self.until):
                self._advance(max(self.now, reply.due))
                reply.go.set()
                continue
            if wake_at > self.until:
                self._advance(self.until)
                self.reached.set()
                return [], []
            self._advance(wake_at)
            return [], []


def _real_wait(
    readers: list[socket.socket], writers: list[socket.socket], timeout: float
) -> tuple[list[socket.socket], list[socket.socket]]:
    readable, writable, _ = select.select(readers, writers, [], timeout)
    return readable, writable
