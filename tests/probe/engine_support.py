"""Raw loopback servers and a stand-in canary for the engine's tests.

The servers misbehave on cue (each connection runs a behaviour in a thread); the canary
only writes down what the engine tells it, so a test checks the engine's own contract.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tritonwatch.probe.canary_engine import RawAnswer

REQUEST = (
    b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n"
    b"Content-Length: 4\r\n\r\nbody"
)
OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


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
    closed: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            self.open_now += 1
            self.most_open = max(self.most_open, self.open_now)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
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

    def answered(self, intended: float, answer: RawAnswer | BaseException, woke: float) -> None:
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
