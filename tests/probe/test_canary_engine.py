"""The canary's select-loop engine against raw loopback servers that misbehave on cue.

The engine is handed a stand-in canary that only writes down what it is told, so each
test checks the engine's own contract: open-loop send times, one keep-alive connection
reused, every request answered exactly once (an answer, a timeout, or the error that
ended it), nothing reused that did not finish. ModelCanary's judgement of the answers
is the same code as the event loop's (tests/probe/test_canary.py runs the daemon's
runner, whose plain-HTTP canaries use this engine).
"""

from __future__ import annotations

import asyncio
import errno
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import hpack
import pytest
from engine_support import (
    OK,
    REQUEST,
    Behaviour,
    RawServer,
    Recorder,
    SteppedClock,
    answer_each,
    raw_server,
    read_frame,
    read_request,
    until,
    wake,
)

from support import wait_until
from tritonwatch.probe.canary import engine as engine_module
from tritonwatch.probe.canary import engine_sockets
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.engine_wires import GrpcAnswer
from tritonwatch.wire import http2
from tritonwatch.wire.http1 import HttpProtocolError
from tritonwatch.wire.http2 import UnaryRequest, frame_bytes, grpc_unary_request
from tritonwatch.wire.limits import HttpRequest


def _serve_for(
    port: int,
    canary: Recorder,
    sends: int,
    *,
    timeout: float = 2.0,
    max_in_flight: int = 4,
    request: bytes | UnaryRequest = REQUEST,
    settle: Callable[[], bool] | None = None,
) -> float:
    """Runs the engine for ``canary`` on the real clock until it has taken up ``sends``
    requests, then (``settle`` given) refuses more and waits until ``settle`` says so;
    returns the first intended send time. For what needs real time: timeouts against
    a server's own pace."""
    engine = CanaryEngine()

    async def main() -> float:
        first = time.monotonic() + 0.05
        serving = engine.serve(
            canary, "127.0.0.1", port, HttpRequest(request) if isinstance(request, bytes) else request,
            timeout=timeout, max_in_flight=max_in_flight, first_send=first,
        )  # fmt: skip
        task = asyncio.create_task(serving)
        await until(lambda: len(canary.asked) + canary.refused >= sends, f"{sends} sends")
        if settle is not None:
            canary.allow = False  # no new sends: wait for the answers of those sent
            await until(settle, "the answers of every request sent")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return first

    try:
        return asyncio.run(main())
    finally:
        engine.stop()


def _sends_settled(canary: Recorder) -> Callable[[], bool]:
    """True once every request sent has its answer."""
    return lambda: len(canary.answers) >= len(canary.asked) > 0


def _lockstep(
    port: int,
    canary: Recorder,
    sends: int,
    *,
    timeout: float = 2.0,
    max_in_flight: int = 4,
    request: bytes | UnaryRequest = REQUEST,
    settled: Callable[[], bool] = lambda: True,
) -> float:
    """Runs the engine for ``canary`` on a :class:`SteppedClock`, ``sends`` of its gaps:
    the clock moves to the k-th intended send only once the engine took up the one
    before and every request sent has its answer (and ``settled`` says the server is
    done too). So each send finds the connections exactly as the last answer left
    them, on a host however slow, and nothing times out; returns the first send time."""
    clock = SteppedClock()
    engine = CanaryEngine(clock=clock)
    first = clock.now + canary.gap

    def caught_up(taken: int) -> Callable[[], bool]:
        return lambda: (
            len(canary.asked) + canary.refused == taken
            and len(canary.answers) == len(canary.asked)
            and settled()
        )

    async def main() -> None:
        serving = engine.serve(
            canary, "127.0.0.1", port, HttpRequest(request) if isinstance(request, bytes) else request,
            timeout=timeout, max_in_flight=max_in_flight, first_send=first,
        )  # fmt: skip
        task = asyncio.create_task(serving)
        for k in range(sends):
            clock.now = first + k * canary.gap
            wake(engine)
            await until(caught_up(k + 1), f"send {k + 1} of {sends} and its answer")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    try:
        asyncio.run(main())
    finally:
        engine.stop()
    return first


def _on_schedule(canary: Recorder, first: float, count: int) -> None:
    """Every send went out when due, taken up then, on the stepped clock."""
    due = [first + k * canary.gap for k in range(count)]
    assert canary.asked == due
    assert canary.woke == due


def test_answers_come_back_on_one_reused_connection_at_the_intended_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fails if the engine opens a connection per request while its one connection is
    free, drops or repeats an answer, drifts from the open-loop schedule, or times an
    answer before its send."""
    # Kernel stamps are real time, this clock is stepped: answers are timed by the
    # engine's clock here (tests/probe/test_engine_answer_wait.py times them by stamps).
    monkeypatch.setattr(engine_module, "stamp_arrivals", lambda sock: False)
    canary = Recorder(gap=0.0625)
    with raw_server(answer_each(OK)) as server:
        first = _lockstep(server.port, canary, 10)
    _on_schedule(canary, first, 10)
    assert [at for at, _ in canary.answers] == canary.asked  # each its own, in order
    assert server.requests == [REQUEST] * 10
    assert server.served == [1] * 10  # every request on the one connection, reused
    assert server.connections == 1
    for at, answer in canary.answers:
        assert not isinstance(answer, BaseException)
        status, _headers, body, received = answer
        assert (status, body) == (200, b"{}")
        assert received == at  # read while the clock stood at its send


def test_a_request_taken_up_late_reports_when_the_engine_woke(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fails if the engine reports it took a request up at its intended send time when
    its clock had already passed it (the send lateness, the client's own, would read 0
    and the lateness would be billed to the server's latency instead)."""
    # The answer is read as it comes (no kernel stamps to collect it by on this clock).
    monkeypatch.setattr(engine_module, "stamp_arrivals", lambda sock: False)
    canary = Recorder(gap=1.0)
    clock = SteppedClock()
    engine = CanaryEngine(clock=clock)
    first = clock.now
    clock.now = first + 0.375  # past the send before the engine's first turn

    async def main() -> None:
        request = HttpRequest(REQUEST)
        serving = engine.serve(
            canary,
            "127.0.0.1",
            server.port,
            request,
            timeout=2.0,
            max_in_flight=1,
            first_send=first,
        )
        task = asyncio.create_task(serving)
        await until(lambda: len(canary.answers) == 1, "the late request's answer")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    with raw_server(answer_each(OK)) as server:
        try:
            asyncio.run(main())
        finally:
            engine.stop()
    assert canary.asked == [first]  # one send due (the next is a second later)
    assert canary.woke == [first + 0.375]  # taken up when the engine woke, not when due


def test_a_server_that_never_answers_times_every_request_out_none_lost() -> None:
    """Fails if a request stuck behind max_in_flight is dropped instead of timing out,
    more than max_in_flight are sent at once, or a timed-out connection is reused (its
    late answer would be read as the next request's)."""
    canary = Recorder(gap=0.02)

    def silent(conn: socket.socket, server: RawServer) -> None:
        buffer = bytearray()
        while (request := read_request(conn, buffer)) is not None:
            server.arrivals.append(time.monotonic())
            server.requests.append(request)

    with raw_server(silent) as server:
        _serve_for(server.port, canary, 10, timeout=0.15, max_in_flight=2,
                   settle=_sends_settled(canary))  # fmt: skip
        wait_until(lambda: len(server.requests) >= len(canary.asked), 10, "every request read")
    assert len(canary.answers) == len(canary.asked) >= 10
    assert all(isinstance(answer, TimeoutError) for _, answer in canary.answers)
    assert [at for at, _ in canary.answers] == sorted(canary.asked)
    # Two in flight at most: the k-th request went out only once the (k-2)-th timed out
    # (lower bounds: a slow host only makes them later).
    intended, arrivals = sorted(canary.asked), sorted(server.arrivals)
    assert all(arrivals[k] >= intended[k - 2] + 0.15 for k in range(2, len(arrivals)))
    # Each timed-out connection was closed: every request the server saw came on a new one.
    assert server.connections == len(server.requests) == len(canary.asked)


def test_a_refused_port_is_a_refused_connection_per_request() -> None:
    """Fails if a refused connect is retried silently, raised out of the engine, or
    reported as anything but ConnectionRefusedError (the breaker and the logs read it)."""
    canary = Recorder(gap=0.0625)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]  # bound, not listening: connections are refused
        first = _lockstep(port, canary, 4)
    _on_schedule(canary, first, 4)
    assert len(canary.answers) == 4
    assert all(isinstance(answer, ConnectionRefusedError) for _, answer in canary.answers)


def test_an_answer_cut_short_is_a_connection_error_and_the_next_one_reconnects() -> None:
    """Fails if half an answer is read as a whole one, or the broken connection is reused."""
    canary = Recorder(gap=0.0625)

    def cut_first(conn: socket.socket, server: RawServer) -> None:
        if server.connection() == 1:
            server.served.append(1)
            server.requests.append(read_request(conn, bytearray()) or b"")
            conn.sendall(OK[:30])  # part of the head, then the connection goes
            return
        answer_each(OK)(conn, server)

    with raw_server(cut_first) as server:
        _lockstep(server.port, canary, 4)
    first, *rest = [answer for _, answer in canary.answers]
    assert isinstance(first, ConnectionResetError)
    assert len(rest) == 3 and all(not isinstance(a, BaseException) and a[0] == 200 for a in rest)
    assert server.served == [1, 2, 2, 2]  # a new connection, then reused
    assert server.connections == 2


def test_an_idle_connection_the_server_closed_is_not_used_again() -> None:
    """Fails if the engine sends on a keep-alive connection the server already closed
    (the request would fail for nothing) instead of opening a new one."""
    canary = Recorder(gap=0.125)

    def one_then_close(conn: socket.socket, server: RawServer) -> None:
        buffer = bytearray()
        server.served.append(server.connection())
        server.requests.append(read_request(conn, buffer) or b"")
        conn.sendall(OK)

    with raw_server(one_then_close) as server:
        # The next send only once the server has closed (its FIN is in the kernel).
        _lockstep(server.port, canary, 4, settled=lambda: server.open_now == 0)
    assert len(canary.answers) == 4
    assert all(not isinstance(a, BaseException) and a[0] == 200 for _, a in canary.answers)
    assert server.served == [1, 2, 3, 4]
    assert server.connections == 4


def test_a_slow_server_does_not_slow_the_schedule_and_latency_counts_the_wait() -> None:
    """Fails if requests waiting for the one allowed connection are sent late *and*
    timed from their late send (coordinated omission): their latency must grow."""
    canary = Recorder(gap=0.02)
    with raw_server(answer_each(OK, delay=0.06)) as server:
        _serve_for(server.port, canary, 10, max_in_flight=1, settle=_sends_settled(canary))
    assert len(canary.answers) == len(canary.asked) >= 10
    latencies = [a[3] - at for at, a in canary.answers if not isinstance(a, BaseException)]
    assert len(latencies) == len(canary.answers)
    # Three sends per service time: the k-th waits for k earlier ones (40 ms more each
    # at least; a slow host only adds). Timed from the intended send, it must grow.
    assert latencies[-1] > latencies[0] + 0.2
    assert server.connections == 1


def test_nothing_is_sent_while_the_canary_says_not_to() -> None:
    """Fails if the engine sends when the canary is paused or its breaker is open."""
    canary = Recorder(gap=0.0625, allow=False)
    with raw_server(answer_each(OK)) as server:
        _lockstep(server.port, canary, 5)
    assert canary.refused == 5  # asked at each due time, and refused
    assert canary.asked == []
    assert canary.answers == []
    assert server.requests == []


def test_a_request_larger_than_the_socket_buffer_goes_out_whole() -> None:
    """Fails if a partial send() is taken for a whole one (the server would wait for
    the rest of the body forever and every request would time out)."""
    body = bytes(range(256)) * 16384  # 4 MiB
    request = (
        b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    canary = Recorder(gap=0.0625)
    with raw_server(answer_each(OK)) as server:
        _lockstep(server.port, canary, 2, request=request)
    assert server.requests == [request] * 2
    assert len(canary.answers) == 2
    assert all(not isinstance(a, BaseException) and a[0] == 200 for _, a in canary.answers)


def test_a_chunked_answer_and_a_garbled_one() -> None:
    """Fails if chunked answers stop being joined, or a garbled status line is read as
    an answer instead of failing as HttpProtocolError."""
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    )
    canary = Recorder(gap=0.0625)
    with raw_server(answer_each(chunked)) as server:
        _lockstep(server.port, canary, 3)
    assert len(canary.answers) == 3
    assert all(not isinstance(a, BaseException) and a[2] == b"abcde" for _, a in canary.answers)
    assert server.served == [1, 1, 1]
    garbled = Recorder(gap=0.0625)
    with raw_server(answer_each(b"HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n")) as server:
        _lockstep(server.port, garbled, 3)
    assert len(garbled.answers) == 3
    assert all(isinstance(a, HttpProtocolError) for _, a in garbled.answers)
    assert server.served == [1, 2, 3]  # a garbled connection is never reused


def test_stopping_the_canary_closes_its_connections() -> None:
    """Fails if a removed canary's sockets stay open (a reload would leak a connection
    per model) or it keeps sending after its task is cancelled."""
    canary = Recorder(gap=0.02)
    with raw_server(answer_each(OK)) as server:
        _serve_for(server.port, canary, 3)
        assert server.closed.wait(5), "the engine left its connection open"
        seen = len(server.requests)
        time.sleep(0.1)
        assert len(server.requests) == seen


def test_past_select_limits_the_wait_falls_back_to_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails if, with descriptors past select()'s FD_SETSIZE (a daemon with over 1024
    open), the poll() fallback misreports which sockets are ready."""
    monkeypatch.setattr(engine_sockets, "FD_SETSIZE", 0)  # every descriptor is "too high"
    left, right = socket.socketpair()
    idle_a, idle_b = socket.socketpair()
    with left, right, idle_a, idle_b:
        right.send(b"x")
        readable, writable = engine_sockets.wait_ready([left, idle_a], [right], 1.0)
        assert (readable, writable) == ([left], [right])
        readable, writable = engine_sockets.wait_ready([idle_a], [], 0.05)
        assert (readable, writable) == ([], [])


class _PollOnly:
    """The ``select`` module with ``select()`` refused: what is left is ``poll()``."""

    POLLIN, POLLOUT, poll = select.POLLIN, select.POLLOUT, select.poll

    @staticmethod
    def select(*_: object) -> None:
        raise AssertionError("select() called with descriptors past FD_SETSIZE")


def test_past_select_limits_the_engine_itself_waits_with_poll(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fails if the engine's own turns (the main wait, the look at an idle connection)
    call select() when a watched descriptor is past FD_SETSIZE, where it would raise
    and stop every canary, instead of poll()."""
    monkeypatch.setattr(engine_sockets, "FD_SETSIZE", 0)  # every descriptor is "too high"
    monkeypatch.setattr(engine_sockets, "select", _PollOnly)
    canary = Recorder(gap=0.0625)
    with raw_server(answer_each(OK)) as server:
        first = _lockstep(server.port, canary, 5)
    _on_schedule(canary, first, 5)
    assert len(canary.answers) == 5
    assert server.served == [1] * 5  # the idle connection was looked at, and reused
    assert all(not isinstance(answer, BaseException) for _, answer in canary.answers)


UNREACHABLE = "127.255.255.255"
"""Loopback's broadcast address: a TCP connect to it fails at once (ENETUNREACH), in the
call itself. A refused loopback port never does (EINPROGRESS, then SO_ERROR)."""


def test_a_connect_that_fails_at_once_hands_the_connection_to_the_next_waiting() -> None:
    """Fails if a connect that fails in the call itself (no route, no local port left)
    leaves the requests queued behind it waiting for a connection nobody holds: each
    must be tried at once and fail on its own, not time out seconds later."""
    canary = Recorder(gap=0.03)
    first_read, release = threading.Event(), threading.Event()
    closing_ok = OK.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1)

    def hold_the_first(conn: socket.socket, server: RawServer) -> None:
        server.requests.append(read_request(conn, bytearray()) or b"")
        first_read.set()
        release.wait(10)
        conn.sendall(closing_ok)  # the engine closes it: the next request must connect

    engine = CanaryEngine()

    async def main() -> None:
        serving = engine.serve(
            canary, "127.0.0.1", server.port, HttpRequest(REQUEST),
            timeout=5.0, max_in_flight=1, first_send=time.monotonic() + 0.02,
        )  # fmt: skip
        task = asyncio.create_task(serving)
        assert await asyncio.to_thread(first_read.wait, 10)
        (channel,) = engine._channels
        channel.address = (socket.AF_INET, (UNREACHABLE, server.port))  # the route goes
        await until(lambda: len(canary.asked) >= 4, "three sends behind the first")
        canary.allow = False
        release.set()
        await until(lambda: len(canary.answers) == len(canary.asked), "every answer")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    with raw_server(hold_the_first) as server:
        try:
            asyncio.run(main())
        finally:
            engine.stop()
    assert len(canary.answers) == len(canary.asked) >= 4
    assert [at for at, _ in canary.answers] == canary.asked
    (_, first), *rest = canary.answers
    assert not isinstance(first, BaseException) and first[0] == 200
    for _, answer in rest:
        assert isinstance(answer, OSError) and not isinstance(answer, TimeoutError), answer
        assert answer.errno == errno.ENETUNREACH
    assert server.connections == 1


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="lists descriptors via /proc")
def test_an_engine_never_served_holds_no_descriptor() -> None:
    """Fails if the engine opens its wake-up socket pair (or anything) before a canary
    is handed to it: the tools' runners build one and never serve plain HTTP."""
    before = {p.name for p in Path("/proc/self/fd").iterdir()}
    engine = CanaryEngine()
    opened = {p.name for p in Path("/proc/self/fd").iterdir()} - before
    engine.stop()
    assert opened == set()


# --- gRPC over the engine's own HTTP/2 (wire/http2.py) --------------------------------

GRPC_CALL = grpc_unary_request("127.0.0.1:1", "/inference.GRPCInferenceService/ModelInfer",
                               b"ask", 2.0)  # fmt: skip


def grpcraw_server(*, goaway_after: int | None = None, refuse_first: bool = False) -> Behaviour:
    """An h2c gRPC server: SETTINGS, then for each call its answer (the stream id as its
    message) and a PING, as gRPC servers probe bandwidth after a call. ``goaway_after``:
    a GOAWAY and close after that many answers; ``refuse_first``: the connection's first
    call gets a GOAWAY excluding it instead."""

    def behaviour(conn: socket.socket, server: RawServer) -> None:
        encoder, buffer = hpack.Encoder(), bytearray()
        while len(buffer) < len(http2.PREFACE):
            buffer += conn.recv(65536)
        del buffer[: len(http2.PREFACE)]
        conn.sendall(frame_bytes(http2.SETTINGS, 0, 0))
        answered = 0
        while (got := read_frame(conn, buffer)) is not None:
            kind, flags, stream, payload = got
            server.requests.append(bytes((kind,)) + payload)
            if kind != http2.DATA or not flags & http2.END_STREAM:
                continue
            if refuse_first and not answered:
                conn.sendall(frame_bytes(http2.GOAWAY, 0, 0, struct.pack(">II", 0, 0)))
                return
            head = encoder.encode([(":status", "200"), ("content-type", "application/grpc")])
            trailers = encoder.encode([("grpc-status", "0")])
            message = str(stream).encode()
            answered += 1
            leaving = goaway_after is not None and answered >= goaway_after
            ping = frame_bytes(http2.PING, 0, 0, b"bdpprobe")
            goaway = frame_bytes(http2.GOAWAY, 0, 0, struct.pack(">II", stream, 0))
            # One write: a GOAWAY arrives with the answer, never after the next call left.
            conn.sendall(
                frame_bytes(http2.HEADERS, http2.END_HEADERS, stream, head)
                + frame_bytes(http2.DATA, 0, stream, struct.pack(">BI", 0, len(message)) + message)
                + frame_bytes(http2.HEADERS, http2.END_HEADERS | http2.END_STREAM, stream, trailers)
                + (ping + goaway if leaving else b"")
            )
            if leaving:
                return
            time.sleep(0.002)  # the PING lands while the connection idles, as real ones do
            conn.sendall(ping)

    return behaviour


def _grpc_messages(canary: Recorder) -> list[bytes | str]:
    """Each answer's message (the stream id it came on), or the error's type name."""
    out: list[bytes | str] = []
    for _, answer in canary.answers:
        if isinstance(answer, BaseException):
            out.append(type(answer).__name__)
        else:
            assert isinstance(answer, GrpcAnswer)
            assert answer.reply.status == 0
            out.append(answer.reply.payload)
    return out


def test_grpc_calls_reuse_one_http2_connection_on_odd_streams_pings_answered() -> None:
    """Fails if the engine opens an HTTP/2 connection per call, reuses a stream id, drops
    the session's state between calls, or leaves the server's PING unanswered (or takes
    the PING that arrives while the connection idles for bytes nobody asked for)."""
    canary = Recorder(gap=0.0625)
    ack = bytes((http2.PING,)) + b"bdpprobe"
    with raw_server(grpcraw_server()) as server:
        _lockstep(server.port, canary, 5, request=GRPC_CALL)
        # Each probe but perhaps the last is acknowledged; the last acknowledgement may
        # still be on its way to the server's thread when the fifth answer is in.
        wait_until(lambda: server.requests.count(ack) >= 4, 10, "four PING acknowledgements")
    assert len(canary.answers) == 5
    assert server.connections == 1
    assert _grpc_messages(canary) == [str(1 + 2 * k).encode() for k in range(5)]


def test_a_grpc_goaway_after_an_answer_reconnects_and_loses_nothing() -> None:
    """Fails if a connection the server said GOAWAY on is used again, or a call that
    came after it is lost instead of going out on a new connection."""
    canary = Recorder(gap=0.0625)
    with raw_server(grpcraw_server(goaway_after=2)) as server:
        _lockstep(server.port, canary, 5, request=GRPC_CALL)
    messages = _grpc_messages(canary)
    assert messages == [b"1", b"3", b"1", b"3", b"1"]  # two calls per connection
    assert server.connections == 3


def test_a_grpc_goaway_excluding_the_call_is_a_connection_error_then_it_reconnects() -> None:
    """Fails if a call the server refused with GOAWAY is not an error the canary counts
    (a connection error), or the next call does not reconnect."""
    canary = Recorder(gap=0.0625)
    with raw_server(grpcraw_server(refuse_first=True)) as server:
        _lockstep(server.port, canary, 4, request=GRPC_CALL)
    messages = _grpc_messages(canary)
    assert messages == ["Http2ClosedError"] * 4  # every connection refuses its first
    assert server.connections == 4
    (_, error), *_ = canary.answers
    assert isinstance(error, ConnectionError)
    assert "went away before the call" in str(error)
