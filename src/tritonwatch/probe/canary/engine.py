"""The canary engine: every engine-spoken canary's requests sent and read by one thread
with a bare ``select()`` loop.

Why not the event loop: the canary's CPU goal (a daemon watching twenty models at one
request a second in a percent of a core, benchmarks/RESULTS.md, §3: footprint) is one
wake-up of one thread per request, and asyncio spends several turns per request around
it (a task, a future, timeouts, a select *and* an epoll call per wait). The engine
sleeps in one ``select()`` over every socket until the next send or deadline, builds each
request's bytes once, reads each answer to its length, and hands it to its canary
(:class:`~tritonwatch.probe.canary.engine_wires.EngineCanary`), which judges and records
it as the event-loop path does. Where the CPU goes, against the leanest Python
canaries: ``benchmarks/RESULTS.md``, §3b.

Open loop: each request has an intended send time; it goes out then on an idle
connection (a new one while fewer than ``max_in_flight`` are busy) or waits for one with
its clock running, and fails as a timeout at ``intended + timeout`` wherever it is.
Latency runs from when the thread took the request up (its own lateness is the client's,
reported apart) to the kernel's arrival stamp of the answer's last byte, so an answer
may wait in the kernel to be collected with others (:data:`ANSWER_WAIT`).

Each connection speaks one protocol, its wire (:mod:`~tritonwatch.probe.canary.engine_wires`):
HTTP/1.1 keep-alive, a unary gRPC call over a kept HTTP/2 session, a stream
(:mod:`~tritonwatch.probe.canary.engine_stream`), any of them inside TLS
(:mod:`~tritonwatch.probe.canary.engine_tls`). Everything before the first send
(metadata, config, extensions) and a gRPC request too large for a fresh connection's
window stay on the event loop. A connection that did not finish its exchange is closed,
never reused.

The engine never goes silent: a crash of its loop is logged, counted and survived
(:meth:`CanaryEngine._run`), and each canary's host name is followed as it moves
(:func:`~tritonwatch.probe.canary.engine_channels.follow_name`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import heapq
import itertools
import math
import os
import socket
import threading
import time
from collections.abc import Callable

from tritonwatch.common.logs import get_logger
from tritonwatch.probe.canary import engine_sockets
from tritonwatch.probe.canary.arrival_stamps import receive_stamped, stamp_arrivals
from tritonwatch.probe.canary.engine_channels import (
    Address,
    Channel,
    EngineCrashedError,
    EngineRequest,
    Exchange,
    Resolve,
    Waker,
    follow_name,
    resolve_all,
)
from tritonwatch.probe.canary.engine_stream import StreamWire
from tritonwatch.probe.canary.engine_tls import TlsSettings, TlsWire
from tritonwatch.probe.canary.engine_wires import EngineCanary, RawAnswer
from tritonwatch.probe.canary.timer_slack import tighten_timer_slack
from tritonwatch.wire.http1 import HttpProtocolError
from tritonwatch.wire.http2 import Http2ClosedError

_log = get_logger("canary")
READ_CHUNK = 64 * 1024
ANSWER_WAIT = 0.5
"""How long a unary answer may wait in the kernel before the engine reads it (seconds).

The kernel stamps each segment's arrival (probe/canary/arrival_stamps.py), so when an
answer is read changes nothing measured, and reading each on its own would be a wake-up
of this thread per answer: collected at the next send or this much later, the answers of
many models share wake-ups. Not for streams (each read's stamp is one token's), a
request taken from the waiting queue, a model whose next send comes sooner, nor where
the kernel gives no stamps."""
COLLECT_EARLY = 0.25
"""A turn that wakes for a send collects every waiting answer when the oldest is due
within this long, so most collections ride on a send's wake-up instead of their own."""
RESTART_BACKOFF_MIN = 0.1
RESTART_BACKOFF_MAX = 5.0
"""The wait before the engine's loop runs again after a crash: doubling from the first
to the second, back to the first once it ran :data:`SETTLE_SECONDS` without one."""
SETTLE_SECONDS = 60.0
"""How long after a crash the engine reads as recovering (``/health`` degraded)."""


class CanaryEngine:
    """Runs the plain-HTTP and gRPC canaries handed to :meth:`serve` on one thread of its own."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, resolve: Resolve = resolve_all
    ) -> None:
        self._clock = clock
        self._resolve = resolve
        self._lock = threading.Lock()
        self._readdressed: list[tuple[Channel, tuple[Address, ...]]] = []
        """New lookups' results to take on, from the event loop."""
        self._restarts = 0
        self._crashed_at: float | None = None
        """When the engine's loop last crashed (its clock), None if it never did."""
        self._added: list[tuple[Channel, float]] = []
        """Canaries to take on, each with its first send time."""
        self._removed: list[Channel] = []
        self._channels: list[Channel] = []
        self._due: list[tuple[float, int, Channel]] = []
        """(next send, tie-break, channel): the one record of when each canary sends next."""
        self._exchanges: dict[int, tuple[Channel, Exchange]] = {}
        """Every exchange in flight by its socket's descriptor (what a ready socket is)."""
        self._order = itertools.count()
        self._waker: Waker | None = None
        """Made with the thread: an engine never served (a tool's runner) holds no socket."""
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._sent = 0
        self._turns = 0
        self._read_buffer = bytearray(READ_CHUNK)
        self._read_view = memoryview(self._read_buffer)
        self._next_deadline = 0.0
        """The earliest deadline of a request in flight or waiting, as of the last wait."""
        self._waiting = 0
        """Requests waiting for a connection, all channels together: while none waits, a
        turn looks at no channel (each look at twenty idle ones cost CPU every turn)."""
        self._collect_at = math.inf
        """The earliest ``collect_by`` of an answer left in the kernel, as of the last wait."""
        self._stamped = True
        """Whether the kernel stamps arrivals here (every socket so far took the option
        and every read came stamped); answers wait for collection only while it does."""

    async def serve(
        self,
        canary: EngineCanary,
        host: str,
        port: int,
        request: EngineRequest,
        *,
        timeout: float,
        max_in_flight: int,
        first_send: float,
        tls: TlsSettings | None = None,
    ) -> None:
        """Sends ``request`` (an HTTP/1.1 request, a gRPC call over HTTP/2, a stream's
        requests, probe/canary/engine_stream.py, or requests made per send,
        engine_wires.py) to ``host:port`` on ``canary``'s schedule until cancelled; a
        stream's timeout is ``timeout``, for the whole stream; ``tls``: over TLS
        (probe/canary/engine_tls.py), else in clear. A name without an address yet
        fails each send as a connection error while it is looked up again."""
        loop = asyncio.get_running_loop()
        try:
            addresses = tuple(await self._resolve(host, port))
        except OSError as error:
            _log.warning("canary_resolve_failed", host=host, error=str(error)[:200])
            addresses = ()
        failed = asyncio.Event()

        def connect_failed() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: shutting down
                loop.call_soon_threadsafe(failed.set)

        channel = Channel(
            canary,
            addresses[0] if addresses else None,
            request,
            timeout,
            max_in_flight,
            tls=tls,
            addresses=addresses,
            connect_failed=connect_failed,
        )
        self._command(added=(channel, first_send))

        def moved(fresh: tuple[Address, ...]) -> None:
            with self._lock:
                self._readdressed.append((channel, fresh))
            self._command()

        try:
            await follow_name(
                channel, host, port, failed, resolve=self._resolve, moved=moved
            )  # until cancelled
        finally:
            self._command(removed=channel)

    @property
    def restarts(self) -> int:
        """How many times the engine's loop crashed and ran again."""
        return self._restarts

    def recovering(self) -> bool:
        """Whether the loop crashed within the last :data:`SETTLE_SECONDS` (``/health``
        says degraded meanwhile)."""
        crashed = self._crashed_at
        return crashed is not None and self._clock() - crashed < SETTLE_SECONDS

    @property
    def sent(self) -> int:
        """Requests sent so far, all canaries together (tests ask which path sent)."""
        return self._sent

    @property
    def turns(self) -> int:
        """Wake-ups of the thread so far (tests ask how many a request costs)."""
        return self._turns

    def stop(self, timeout: float = 2.0) -> None:
        """Stops the thread; every connection is closed, nothing more is recorded."""
        with self._lock:
            self._stopping = True
            thread, waker = self._thread, self._waker
        if thread is None or waker is None:
            return  # never started: nothing to stop, nothing to close
        waker.wake()
        thread.join(timeout)
        if not thread.is_alive():
            waker.close()

    def _command(
        self, *, added: tuple[Channel, float] | None = None, removed: Channel | None = None
    ) -> None:
        with self._lock:
            if added is not None:
                self._added.append(added)
            if removed is not None:
                self._removed.append(removed)
            if self._thread is None and not self._stopping:
                self._waker = Waker()
                self._thread = threading.Thread(
                    target=self._run, args=(self._waker,), name="canary-engine", daemon=True
                )
                self._thread.start()
            waker = self._waker
        if waker is not None:
            waker.wake()

    # --- the thread -------------------------------------------------------------------

    def _run(self, waker: Waker) -> None:
        """The engine's thread: turns until stopped. A crash is logged with its
        traceback, counted, and survived: the requests in flight fail as ours
        (:class:`EngineCrashedError`), every canary keeps its schedule, and the loop
        runs again after a backoff, so no canary goes silent."""
        tighten_timer_slack()
        backoff = RESTART_BACKOFF_MIN
        try:
            while not self._stopping:
                try:
                    while not self._stopping:
                        self._turn(waker)
                except Exception:
                    now = self._clock()
                    if self._crashed_at is not None and now - self._crashed_at >= SETTLE_SECONDS:
                        backoff = RESTART_BACKOFF_MIN  # ran a good while since the last one
                    self._restarts += 1
                    self._crashed_at = now
                    _log.exception(
                        "canary_engine_crashed", restarts=self._restarts, restart_in_seconds=backoff
                    )
                    self._recover()
                    engine_sockets.wait_ready([waker.read], [], backoff)  # a stop ends the wait
                    backoff = min(backoff * 2, RESTART_BACKOFF_MAX)
        finally:
            for channel in self._channels:
                self._close_channel(channel)
            waker.close()

    def _recover(self) -> None:
        """After a crash: the exchanges in flight fail as ours and their sockets close
        (their state is in doubt), and a canary whose next send the crash lost gets one
        now."""
        for channel, exchange in list(self._exchanges.values()):
            self._unregister(channel, exchange)
            exchange.sock.close()
            crashed = EngineCrashedError("the canary engine crashed with this request in flight")
            _deliver(channel, exchange.intended, exchange.woke, crashed)
        scheduled = {id(channel) for _, _, channel in self._due}
        now = self._clock()
        for channel in self._channels:
            if id(channel) not in scheduled and not channel.closed:
                heapq.heappush(self._due, (now, next(self._order), channel))
            self._next_waiting(channel)  # the connections the crash freed go to the waiting

    def _turn(self, waker: Waker) -> None:
        self._turns += 1
        self._take_commands()
        now = self._clock()
        self._send_due(now)
        if now >= self._collect_at - COLLECT_EARLY:
            self._collect(now)  # before expiring: an answer that came in time is no timeout
        self._expire(now)
        readers, writers, fits = self._watched(waker)
        readable, writable = engine_sockets.wait_ready(
            readers, writers, self._wait_for(self._clock()), fits
        )
        for sock in writable:
            self._on_writable(sock)
        for sock in readable:
            if sock is waker.read:
                waker.drain()
            else:
                self._on_readable(sock)

    def _take_commands(self) -> None:
        if not (self._added or self._removed or self._readdressed):
            return  # nothing asked (read without the lock: a command wakes the next turn)
        with self._lock:
            added, self._added = self._added, []
            removed, self._removed = self._removed, []
            readdressed, self._readdressed = self._readdressed, []
        for channel, addresses in readdressed:
            channel.addresses = addresses
            if channel.address not in addresses and addresses:
                channel.address = addresses[0]
                for sock, _ in channel.idle:  # connected to where the name no longer points
                    sock.close()
                channel.idle = []
        for channel, first_send in added:
            self._channels.append(channel)
            heapq.heappush(self._due, (first_send, next(self._order), channel))
        for channel in removed:
            if channel in self._channels:
                self._channels.remove(channel)
            self._close_channel(channel)

    def _wait_for(self, now: float) -> float:
        """How long ``select`` may block: until the next send or deadline (as
        :meth:`_watched` found it this turn), whichever comes first (0 when one is due
        already)."""
        next_send = self._due[0][0] if self._due else math.inf
        wake = min(next_send, self._next_deadline, self._collect_at)
        if wake == math.inf:
            return 1.0  # idle: only a command (the wake socket) ends the wait
        return max(0.0, wake - now)

    def _send_due(self, now: float) -> None:
        while self._due and self._due[0][0] <= now:
            intended, _, channel = heapq.heappop(self._due)
            if channel.closed:
                continue
            following = intended + channel.canary.next_gap()
            if following < now - channel.timeout:
                following = now  # the thread stood still (a suspended process): skip ahead
            if channel.canary.may_send(intended):
                self._start(channel, intended, now, unhurried=following - now > ANSWER_WAIT)
            heapq.heappush(self._due, (following, next(self._order), channel))

    def _start(
        self, channel: Channel, intended: float, woke: float, *, unhurried: bool = False
    ) -> None:
        """Sends the request due at ``intended`` (taken up at ``woke``) on an idle
        connection or a new one, or queues it. ``unhurried``: its answer may wait in
        the kernel for collection (:data:`ANSWER_WAIT`), as the model sends next later."""
        if channel.in_flight >= channel.max_in_flight:
            channel.waiting.append((intended, woke))
            self._waiting += 1
            return
        deadline = intended + channel.timeout
        while channel.idle:
            sock, wire = channel.idle.pop()
            if engine_sockets.revived(sock, wire, self._read_buffer) and wire.reusable():
                exchange = Exchange(
                    sock, intended, woke, deadline, memoryview(b""), False, wire, channel.address
                )
                self._begin(channel, exchange, unhurried)
                return
            sock.close()  # the server closed it (or is going away) while it idled
        if channel.address is None:  # no address yet: follow_name looks the name up again
            channel.next_address()
            _deliver(
                channel, intended, woke, OSError(errno.EHOSTUNREACH, "the name has no address")
            )
            return
        family, address = channel.address
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not stamp_arrivals(sock):
            self._stamped = False
        code = sock.connect_ex(address)
        if code not in (0, errno.EINPROGRESS):
            # Failed at once (no route, no local port left): the connection stays free,
            # and _next_waiting, when it called, goes on to the next waiting request.
            sock.close()
            channel.next_address()
            _deliver(channel, intended, woke, OSError(code, os.strerror(code)))
            return
        wire = channel.new_wire()
        exchange = Exchange(
            sock, intended, woke, deadline, memoryview(b""), True, wire, channel.address
        )
        self._begin(channel, exchange, unhurried)

    def _begin(self, channel: Channel, exchange: Exchange, unhurried: bool = False) -> None:
        self._sent += 1
        wire = exchange.wire
        handshaking = isinstance(wire, TlsWire) and wire.handshaking  # it needs round trips
        if unhurried and self._stamped and not isinstance(wire, StreamWire) and not handshaking:
            exchange.collect_by = min(exchange.woke + ANSWER_WAIT, exchange.deadline)
        self._register(channel, exchange)
        exchange.unsent = memoryview(exchange.wire.start())
        if not exchange.connecting:
            self._push(channel, exchange)

    def _register(self, channel: Channel, exchange: Exchange) -> None:
        """Puts an exchange in flight: found by its descriptor when its socket is
        ready, and counted against its channel's ``max_in_flight``."""
        self._exchanges[exchange.sock.fileno()] = (channel, exchange)
        channel.in_flight += 1

    def _unregister(self, channel: Channel, exchange: Exchange) -> None:
        """Takes an exchange out of flight, before its socket is closed or idles (a
        closed socket's descriptor reads -1, and its number goes to the next socket)."""
        fd = exchange.sock.fileno()
        found = self._exchanges.get(fd)
        if found is not None and found[1] is exchange:
            del self._exchanges[fd]
            channel.in_flight -= 1

    def _push(self, channel: Channel, exchange: Exchange) -> None:
        """Writes what the socket takes of the request now; the rest when it is writable."""
        try:
            sent = exchange.sock.send(exchange.unsent)
        except BlockingIOError:
            return
        except OSError as error:
            self._fail(channel, exchange, error)
            return
        exchange.unsent = exchange.unsent[sent:]

    def _watched(self, waker: Waker) -> tuple[list[socket.socket], list[socket.socket], bool]:
        """The turn's one pass over the exchanges in flight (each pass costs CPU every
        turn): the sockets to watch for reading and for writing, whether ``select()``
        takes them all (the registry's keys are their descriptors), and, kept as
        ``_next_deadline``, the earliest deadline of a request in flight or waiting."""
        readers: list[socket.socket] = [waker.read]
        writers: list[socket.socket] = []
        highest, earliest, collect = waker.read.fileno(), math.inf, math.inf
        for fd, (_, exchange) in self._exchanges.items():
            if exchange.connecting or exchange.unsent:
                writers.append(exchange.sock)
            elif exchange.collect_by:
                collect = min(collect, exchange.collect_by)  # its answer waits in the kernel
            else:
                readers.append(exchange.sock)
            highest = max(highest, fd)
            earliest = min(earliest, exchange.deadline)
        self._collect_at = collect
        if self._waiting:  # each channel's oldest waits longest (its timeout is one)
            oldest = [c.waiting[0][0] + c.timeout for c in self._channels if c.waiting]
            earliest = min([earliest, *oldest])
        self._next_deadline = earliest
        return readers, writers, highest < engine_sockets.FD_SETSIZE

    def _find(self, sock: socket.socket) -> tuple[Channel, Exchange] | None:
        """The exchange a ready socket belongs to; None when it left flight earlier in
        this turn (closed: its descriptor is -1, or already another socket's)."""
        found = self._exchanges.get(sock.fileno())
        if found is None or found[1].sock is not sock:
            return None
        return found

    def _on_writable(self, sock: socket.socket) -> None:
        found = self._find(sock)
        if found is None:
            return
        channel, exchange = found
        if exchange.connecting:
            code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                self._fail(channel, exchange, OSError(code, os.strerror(code)))
                return
            exchange.connecting = False
        self._push(channel, exchange)

    def _collect(self, now: float) -> None:
        """Reads every answer left waiting in the kernel that has come (one zero-timeout
        wait for them all); one not come by its ``collect_by`` is read when it comes."""
        waiting = [e for _, e in self._exchanges.values() if e.collect_by and not e.unsent]
        if not waiting:
            return
        fits = max(e.sock.fileno() for e in waiting) < engine_sockets.FD_SETSIZE
        came = {
            id(s) for s in engine_sockets.wait_ready([e.sock for e in waiting], [], 0.0, fits)[0]
        }
        for exchange in waiting:
            if id(exchange.sock) in came:
                exchange.collect_by = 0.0
                self._on_readable(exchange.sock)
            elif exchange.collect_by <= now:
                exchange.collect_by = 0.0  # slower than the wait: read the moment it comes

    def _on_readable(self, sock: socket.socket) -> None:
        found = self._find(sock)
        if found is None:
            return
        channel, exchange = found
        try:
            # Into one reused buffer: a fresh 256 KiB bytes per recv() is an mmap and a
            # shrink each time, and this thread's malloc arena grew RSS by it.
            size, arrived = receive_stamped(sock, self._read_buffer)
        except BlockingIOError:
            return
        except OSError as error:
            self._fail(channel, exchange, error)
            return
        if arrived is None:
            self._stamped = False  # no stamp: answers must be read as they come from now on
        if not size:
            self._fail(channel, exchange, ConnectionResetError("connection closed by the server"))
        else:
            self._on_data(channel, exchange, bytes(self._read_view[:size]), arrived)

    def _on_data(
        self, channel: Channel, exchange: Exchange, data: bytes, arrived: float | None = None
    ) -> None:
        sock, wire = exchange.sock, exchange.wire
        received = arrived if arrived is not None else self._clock()
        try:
            answer = wire.feed(data, received)
        except (HttpProtocolError, Http2ClosedError, OSError) as error:  # OSError: ssl.SSLError
            self._fail(channel, exchange, error)
            return
        if answer is None:
            owed = wire.take_output()  # acknowledgements due before the answer comes
            if owed:
                exchange.unsent = memoryview(bytes(exchange.unsent) + owed)
                self._push(channel, exchange)
            return
        self._unregister(channel, exchange)
        current = exchange.address == channel.address  # (the name may have moved meanwhile)
        if current and wire.reusable() and engine_sockets.sent_whole(sock, wire.take_output()):
            channel.idle.append((sock, wire))
        else:
            sock.close()
        _deliver(channel, exchange.intended, exchange.woke, answer)
        self._next_waiting(channel)

    def _expire(self, now: float) -> None:
        if now < self._next_deadline:
            return
        # In the order they were sent (the registry's), as each channel's answers go.
        expired = [(c, e) for c, e in self._exchanges.values() if e.deadline <= now]
        for channel, exchange in expired:
            self._fail(channel, exchange, TimeoutError("the canary's timeout passed"))
        for channel in list(self._channels) if self._waiting else ():
            while channel.waiting and channel.waiting[0][0] + channel.timeout <= now:
                error = TimeoutError("no connection came free in time")
                self._waiting -= 1
                _deliver(channel, *channel.waiting.popleft(), error)

    def _fail(self, channel: Channel, exchange: Exchange, error: BaseException) -> None:
        self._unregister(channel, exchange)
        exchange.sock.close()
        if exchange.connecting:  # refused, unreachable, or timed out connecting
            channel.next_address()
        wire = exchange.wire
        # A stream that fails keeps what it read (its tokens count, as on the loop).
        failure = wire.failed(error) if isinstance(wire, StreamWire) else error
        _deliver(channel, exchange.intended, exchange.woke, failure)
        self._next_waiting(channel)

    def _next_waiting(self, channel: Channel) -> None:
        """A connection came free: the oldest waiting requests go, their clocks still
        running, until one holds it. A loop, not one start: a connect that fails at once
        leaves the connection free for the next, and a recursion through every waiting
        request would overrun the stack where hundreds wait."""
        while channel.waiting and not channel.closed and channel.in_flight < channel.max_in_flight:
            self._waiting -= 1
            self._start(channel, *channel.waiting.popleft())

    def _close_channel(self, channel: Channel) -> None:
        channel.closed = True
        for sock, _ in channel.idle:
            sock.close()
        for exchange in [e for c, e in self._exchanges.values() if c is channel]:
            self._unregister(channel, exchange)
            exchange.sock.close()
        channel.idle = []
        self._waiting -= len(channel.waiting)
        channel.waiting.clear()


def _deliver(
    channel: Channel, intended: float, woke: float, answer: RawAnswer | BaseException
) -> None:
    """Hands one answer to its canary; a canary that raises is logged, and the engine
    (every other model's canary) goes on."""
    try:
        channel.canary.record(intended, answer, woke)
    except Exception:
        _log.exception("canary_answer_failed")
