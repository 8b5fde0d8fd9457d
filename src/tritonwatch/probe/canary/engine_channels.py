"""One model's canary inside the engine: its channel, its exchanges, its name followed.

The engine (:mod:`~tritonwatch.probe.canary.engine`) keeps, for each canary it sends
for, a :class:`Channel`: the schedule's inputs, the connections kept idle, the requests
waiting for one, and the addresses its host name had at its last lookup. Each request
on a connection is an :class:`Exchange`. A name is looked up again periodically and
after a connect failure (:func:`follow_name`), so a server that moved (a pod
rescheduled, a DNS record changed) is followed, every address tried in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tritonwatch.common.logs import get_logger
from tritonwatch.probe.canary.engine_stream import StreamRequests
from tritonwatch.probe.canary.engine_tls import TlsSettings
from tritonwatch.probe.canary.engine_wires import (
    EngineCanary,
    GrpcWire,
    Http1Wire,
    VaryingRequests,
    Wire,
)
from tritonwatch.wire.http2 import UnaryRequest
from tritonwatch.wire.limits import HttpRequest

_log = get_logger("canary")
RESOLVE_EVERY = 10.0
"""How often a canary's host name is looked up again while everything works (seconds):
a name that moved (a pod rescheduled, a DNS record changed) is followed within this
plus one send, under the 15 s the watcher promises."""
RESOLVE_MIN_GAP = 2.0
"""The least time between two lookups of one canary's name, however many connects fail
meanwhile: a dead server refused at 20 requests a second must not become 20 lookups."""
Address = tuple[int, Any]
"""(address family, socket address): what ``getaddrinfo`` resolved the target to."""
Resolve = Callable[[str, int], Awaitable[list[Address]]]
"""Looks a host name up: every address it has, in the resolver's order."""


class EngineCrashedError(RuntimeError):
    """The engine's own loop failed while this request was in flight: the fault is
    ours, not the server's (the canary records it as ``client_error``)."""


async def resolve_all(host: str, port: int) -> list[Address]:
    """Every address ``host`` has for a TCP connection, duplicates left out, on the event
    loop's resolver (``getaddrinfo`` in its executor: it may block, never the engine)."""
    found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses: list[Address] = []
    for family, _, _, _, address in found:
        if (family, address) not in addresses:
            addresses.append((family, address))
    return addresses


EngineRequest = HttpRequest | UnaryRequest | StreamRequests | VaryingRequests
"""What a canary hands the engine: an HTTP/1.1 request, a unary gRPC call, a streaming
canary's requests, or requests made per send."""
Endpoint = tuple[str, int, TlsSettings | None]
"""(host, port, TLS or None: in clear) the engine connects to."""


@dataclass(eq=False, slots=True)
class Exchange:
    """One request on one connection: connecting, sending, or waiting for the answer."""

    sock: socket.socket
    intended: float
    woke: float
    """When the engine took the request up (``intended``, or later when it woke late)."""
    deadline: float
    unsent: memoryview
    connecting: bool
    wire: Wire
    address: Address | None = None
    """Where its socket connected: one the name no longer points to is not kept idle."""
    collect_by: float = 0.0
    """0: its answer is read the moment it comes. Otherwise the answer may wait in the
    kernel, its arrival stamped there, until the engine collects it by this time with
    others (see :data:`ANSWER_WAIT`)."""


@dataclass(eq=False)
class Channel:
    """One model's canary: its schedule, its connections and its requests in flight."""

    canary: EngineCanary
    address: Address | None
    """The address in use; None while the name has none (each send fails at once as a
    connection error, and the name is looked up again)."""
    request: EngineRequest
    timeout: float
    max_in_flight: int
    idle: list[tuple[socket.socket, Wire]] = field(default_factory=list)
    waiting: deque[tuple[float, float]] = field(default_factory=deque)
    """(intended, woke) of requests waiting for a connection, oldest first."""
    """Intended send times of requests that found every allowed connection busy."""
    in_flight: int = 0
    """How many of its exchanges are in flight (the engine's ``_exchanges`` holds them)."""
    closed: bool = False
    tls: TlsSettings | None = None
    """How its connections speak TLS; None: in clear."""
    addresses: tuple[Address, ...] = ()
    """Every address the name had at its last lookup; ``address`` is the one in use."""
    connect_failed: Callable[[], None] | None = None
    """Called (from the engine's thread) when a connect fails: the name is looked up again."""

    def next_address(self) -> None:
        """A connect failed: the next request tries the name's next address."""
        if self.address is not None and len(self.addresses) > 1 and self.address in self.addresses:
            at = self.addresses.index(self.address)
            self.address = self.addresses[(at + 1) % len(self.addresses)]
        if self.connect_failed is not None:
            self.connect_failed()

    def new_wire(self) -> Wire:
        """The protocol state of a new connection (over TLS when the target says so)."""
        wire: Wire
        if isinstance(self.request, UnaryRequest):
            wire = GrpcWire(self.request)
        elif isinstance(self.request, StreamRequests | VaryingRequests):
            wire = self.request.new_wire()
        else:
            wire = Http1Wire(self.request)
        return wire if self.tls is None else self.tls.wrap(wire)


class Waker:
    """A socket pair whose read end is in every wait: a byte written to the other end
    ends it, so a command (a canary added or removed, a stop) is taken at once."""

    def __init__(self) -> None:
        self.read, self._write = socket.socketpair()
        self.read.setblocking(False)
        self._write.setblocking(False)

    def wake(self) -> None:
        # BlockingIOError: already woken (the buffer is full); OSError: shutting down.
        with contextlib.suppress(BlockingIOError, OSError):
            self._write.send(b"\0")

    def drain(self) -> None:
        try:
            while self.read.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        """Idempotent: the thread and :meth:`CanaryEngine.stop` may both call it."""
        self.read.close()
        self._write.close()


async def follow_name(
    channel: Channel,
    host: str,
    port: int,
    failed: asyncio.Event,
    *,
    resolve: Resolve,
    moved: Callable[[tuple[Address, ...]], None],
) -> None:
    """Looks ``host`` up again every :data:`RESOLVE_EVERY` seconds and soon after a
    connect fails (never twice within :data:`RESOLVE_MIN_GAP`); a changed answer goes
    to ``moved`` (the engine), with a ``canary_address_changed`` line. A failed lookup keeps the
    addresses known (the next connect failure or period asks again)."""
    loop = asyncio.get_running_loop()
    known, last = channel.addresses, loop.time()
    while True:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(RESOLVE_EVERY):
                await failed.wait()
        await asyncio.sleep(max(0.0, last + RESOLVE_MIN_GAP - loop.time()))
        failed.clear()
        last = loop.time()
        try:
            fresh = tuple(await resolve(host, port))
        except OSError as error:
            _log.warning(
                "canary_resolve_failed",
                host=host,
                error=str(error)[:200],
                **canary_fields(channel.canary),
            )
            continue
        if not fresh or fresh == known:
            continue
        _log.info(
            "canary_address_changed",
            host=host,
            port=port,
            old=[shown(a) for a in known],
            new=[shown(a) for a in fresh],
            **canary_fields(channel.canary),
        )
        known = fresh
        moved(fresh)


def shown(address: Address) -> str:
    """An address as a log line shows it: ``host:port`` (IPv6 in brackets)."""
    host, port = address[1][0], address[1][1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def canary_fields(canary: EngineCanary) -> dict[str, str]:
    """The target and model of a canary, for log lines (when it has a plan)."""
    plan = getattr(canary, "plan", None)
    if plan is None:
        return {}
    return {"target": str(plan.target), "model": str(plan.model)}
