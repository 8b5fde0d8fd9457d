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
    answer_each,
    raw_server,
    read_request,
)

from tritonwatch.probe import canary_engine as engine_module
from tritonwatch.probe import http2
from tritonwatch.probe.canary_engine import CanaryEngine, GrpcAnswer
from tritonwatch.probe.http2 import UnaryRequest, frame_bytes, grpc_unary_request
from tritonwatch.probe.load.http1 import HttpProtocolError


def _serve_for(
    port: int,
    canary: Recorder,
    seconds: float,
    *,
    timeout: float = 2.0,
    max_in_flight: int = 4,
    request: bytes | UnaryRequest = REQUEST,
    settle: Callable[[], bool] | None = None,
) -> float:
    """Runs the engine for ``canary`` for ``seconds``, then (up to 10 s) until ``settle``
    says so; returns the first intended send time."""
    engine = CanaryEngine()

    async def main() -> float:
        first = time.monotonic() + 0.05
        serving = engine.serve(
            canary, "127.0.0.1", port, request,
            timeout=timeout, max_in_flight=max_in_flight, first_send=first,
        )  # fmt: skip
        task = asyncio.create_task(serving)
        await asyncio.sleep(seconds)
        if settle is not None:
            canary.allow = False  # no new sends: wait for the answers of those sent
        limit = time.monotonic() + 10
        while settle is not None and not settle() and time.monotonic() < limit:
            await asyncio.sleep(0.02)
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


def test_answers_come_back_on_one_reused_connection_at_the_intended_times() -> None:
    """Fails if the engine opens a connection per request, drops or repeats an answer,
    drifts from the open-loop schedule, or stamps an answer before its send."""
    # 50 ms apart: a loaded CI host once took over 20 ms to answer, and the next send
    # then rightly found the connection busy (four connections where one was expected).
    canary = Recorder(gap=0.05)
    with raw_server(answer_each(OK)) as server:
        first = _serve_for(server.port, canary, 0.8, settle=_sends_settled(canary))
    assert len(canary.answers) >= 10
    assert len(canary.answers) == len(canary.asked) == len(server.requests)
    assert server.connections == 1
    assert all(request == REQUEST for request in server.requests)
    intended = [at for at, _ in canary.answers]
    assert intended == pytest.approx([first + k * 0.05 for k in range(len(intended))], abs=1e-9)
    for at, answer in canary.answers:
        assert not isinstance(answer, BaseException)
        status, _headers, body, received = answer
        assert (status, body) == (200, b"{}")
        assert received > at


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
        _serve_for(server.port, canary, 0.4, timeout=0.15, max_in_flight=2,
                   settle=_sends_settled(canary))  # fmt: skip
    assert len(canary.answers) == len(canary.asked) >= 10
    assert all(isinstance(answer, TimeoutError) for _, answer in canary.answers)
    assert [at for at, _ in canary.answers] == sorted(canary.asked)
    # Two in flight at most: the k-th request went out only once the (k-2)-th timed out.
    intended, arrivals = sorted(canary.asked), sorted(server.arrivals)
    assert all(arrivals[k] >= intended[k - 2] + 0.15 for k in range(2, len(arrivals)))
    assert arrivals[2] - intended[2] > 0.05  # so it did wait, its clock running
    # Each timed-out connection was closed: every request the server saw came on a new one.
    assert server.connections == len(server.requests) == len(canary.asked)


def test_a_refused_port_is_a_refused_connection_per_request() -> None:
    """Fails if a refused connect is retried silently, raised out of the engine, or
    reported as anything but ConnectionRefusedError (the breaker and the logs read it)."""
    canary = Recorder(gap=0.05)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]  # bound, not listening: connections are refused
        _serve_for(port, canary, 0.3, settle=_sends_settled(canary))
    assert len(canary.answers) == len(canary.asked) >= 4
    assert all(isinstance(answer, ConnectionRefusedError) for _, answer in canary.answers)


def test_an_answer_cut_short_is_a_connection_error_and_the_next_one_reconnects() -> None:
    """Fails if half an answer is read as a whole one, or the broken connection is reused."""
    canary = Recorder(gap=0.05)

    def cut_first(conn: socket.socket, server: RawServer) -> None:
        buffer = bytearray()
        request = read_request(conn, buffer)
        server.requests.append(request or b"")
        if server.connections == 1:
            conn.sendall(OK[:30])  # part of the head, then the connection goes
            return
        conn.sendall(OK)
        answer_each(OK)(conn, server)

    with raw_server(cut_first) as server:
        _serve_for(server.port, canary, 0.3, settle=_sends_settled(canary))
    first, *rest = [answer for _, answer in canary.answers]
    assert isinstance(first, ConnectionResetError)
    assert rest and all(not isinstance(a, BaseException) and a[0] == 200 for a in rest)
    assert server.connections == 2


def test_an_idle_connection_the_server_closed_is_not_used_again() -> None:
    """Fails if the engine sends on a keep-alive connection the server already closed
    (the request would fail for nothing) instead of opening a new one."""
    canary = Recorder(gap=0.1)

    def one_then_close(conn: socket.socket, server: RawServer) -> None:
        buffer = bytearray()
        server.requests.append(read_request(conn, buffer) or b"")
        conn.sendall(OK)

    with raw_server(one_then_close) as server:
        _serve_for(server.port, canary, 0.45, settle=_sends_settled(canary))
    assert len(canary.answers) >= 4
    assert all(not isinstance(a, BaseException) and a[0] == 200 for _, a in canary.answers)
    assert server.connections == len(canary.answers)


def test_a_slow_server_does_not_slow_the_schedule_and_latency_counts_the_wait() -> None:
    """Fails if requests waiting for the one allowed connection are sent late *and*
    timed from their late send (coordinated omission): their latency must grow."""
    canary = Recorder(gap=0.02)
    with raw_server(answer_each(OK, delay=0.06)) as server:
        _serve_for(server.port, canary, 0.3, max_in_flight=1, settle=_sends_settled(canary))
    assert len(canary.answers) == len(canary.asked) >= 10
    latencies = [a[3] - at for at, a in canary.answers if not isinstance(a, BaseException)]
    assert len(latencies) == len(canary.answers)
    # Three sends per service time: the k-th waits for k earlier ones (~40 ms more each).
    assert latencies[-1] > latencies[0] + 0.2
    assert server.connections == 1


def test_nothing_is_sent_while_the_canary_says_not_to() -> None:
    """Fails if the engine sends when the canary is paused or its breaker is open."""
    canary = Recorder(gap=0.02, allow=False)
    with raw_server(answer_each(OK)) as server:
        _serve_for(server.port, canary, 0.25)
    assert canary.refused >= 5
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
    canary = Recorder(gap=0.2)
    with raw_server(answer_each(OK)) as server:
        _serve_for(server.port, canary, 0.3, request=request, settle=_sends_settled(canary))
    assert server.requests and all(seen == request for seen in server.requests)
    assert all(not isinstance(a, BaseException) and a[0] == 200 for _, a in canary.answers)


def test_a_chunked_answer_and_a_garbled_one() -> None:
    """Fails if chunked answers stop being joined, or a garbled status line is read as
    an answer instead of failing as HttpProtocolError."""
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    )
    canary = Recorder(gap=0.05)
    with raw_server(answer_each(chunked)) as server:
        _serve_for(server.port, canary, 0.2, settle=_sends_settled(canary))
    assert canary.answers
    assert all(not isinstance(a, BaseException) and a[2] == b"abcde" for _, a in canary.answers)
    garbled = Recorder(gap=0.05)
    with raw_server(answer_each(b"HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n")) as server:
        _serve_for(server.port, garbled, 0.2, settle=_sends_settled(garbled))
    assert garbled.answers
    assert all(isinstance(a, HttpProtocolError) for _, a in garbled.answers)


def test_stopping_the_canary_closes_its_connections() -> None:
    """Fails if a removed canary's sockets stay open (a reload would leak a connection
    per model) or it keeps sending after its task is cancelled."""
    canary = Recorder(gap=0.02)
    with raw_server(answer_each(OK)) as server:
        _serve_for(server.port, canary, 0.2)
        assert server.closed.wait(5), "the engine left its connection open"
        seen = len(server.requests)
        time.sleep(0.1)
        assert len(server.requests) == seen


def test_past_select_limits_the_wait_falls_back_to_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails if, with descriptors past select()'s FD_SETSIZE (a daemon with over 1024
    open), the poll() fallback misreports which sockets are ready."""
    monkeypatch.setattr(engine_module, "FD_SETSIZE", 0)  # every descriptor is "too high"
    left, right = socket.socketpair()
    idle_a, idle_b = socket.socketpair()
    with left, right, idle_a, idle_b:
        right.send(b"x")
        readable, writable = engine_module._wait_ready([left, idle_a], [right], 1.0)
        assert (readable, writable) == ([left], [right])
        readable, writable = engine_module._wait_ready([idle_a], [], 0.05)
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
    monkeypatch.setattr(engine_module, "FD_SETSIZE", 0)  # every descriptor is "too high"
    monkeypatch.setattr(engine_module, "select", _PollOnly)
    canary = Recorder(gap=0.02)
    with raw_server(answer_each(OK)) as server:
        _serve_for(server.port, canary, 0.3, settle=_sends_settled(canary))
    assert len(canary.answers) == len(canary.asked) >= 5
    assert server.connections == 1  # the idle connection was looked at, and reused
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
            canary, "127.0.0.1", server.port, REQUEST,
            timeout=5.0, max_in_flight=1, first_send=time.monotonic() + 0.02,
        )  # fmt: skip
        task = asyncio.create_task(serving)
        assert await asyncio.to_thread(first_read.wait, 10)
        (channel,) = engine._channels
        channel.address = (socket.AF_INET, (UNREACHABLE, server.port))  # the route goes
        limit = time.monotonic() + 10
        while len(canary.asked) < 4 and time.monotonic() < limit:
            await asyncio.sleep(0.01)  # three or more wait behind the first
        canary.allow = False
        release.set()
        while len(canary.answers) < len(canary.asked) and time.monotonic() < limit:
            await asyncio.sleep(0.01)
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


# --- gRPC over the engine's own HTTP/2 (probe/http2.py) --------------------------------

GRPC_CALL = grpc_unary_request("127.0.0.1:1", "/inference.GRPCInferenceService/ModelInfer",
                               b"ask", 2.0)  # fmt: skip


def _read_frame(conn: socket.socket, buffer: bytearray) -> tuple[int, int, int, bytes] | None:
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
        while (got := _read_frame(conn, buffer)) is not None:
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
    canary = Recorder(gap=0.05)
    with raw_server(grpcraw_server()) as server:
        _serve_for(server.port, canary, 0.5, request=GRPC_CALL, settle=_sends_settled(canary))
    count = len(canary.answers)
    assert count >= 5
    assert server.connections == 1
    assert _grpc_messages(canary) == [str(1 + 2 * k).encode() for k in range(count)]
    ping_acks = [r for r in server.requests if r == bytes((http2.PING,)) + b"bdpprobe"]
    assert len(ping_acks) >= count - 1  # each probe but perhaps the last is acknowledged


def test_a_grpc_goaway_after_an_answer_reconnects_and_loses_nothing() -> None:
    """Fails if a connection the server said GOAWAY on is used again, or a call that
    came after it is lost instead of going out on a new connection."""
    canary = Recorder(gap=0.03)
    with raw_server(grpcraw_server(goaway_after=2)) as server:
        _serve_for(server.port, canary, 0.4, request=GRPC_CALL, settle=_sends_settled(canary))
    messages = _grpc_messages(canary)
    assert len(messages) >= 5
    assert messages[:5] == [b"1", b"3", b"1", b"3", b"1"]  # two calls per connection
    assert server.connections == (len(messages) + 1) // 2


def test_a_grpc_goaway_excluding_the_call_is_a_connection_error_then_it_reconnects() -> None:
    """Fails if a call the server refused with GOAWAY is not an error the canary counts
    (a connection error), or the next call does not reconnect."""
    canary = Recorder(gap=0.03)
    with raw_server(grpcraw_server(refuse_first=True)) as server:
        _serve_for(server.port, canary, 0.3, request=GRPC_CALL, settle=_sends_settled(canary))
    messages = _grpc_messages(canary)
    assert len(messages) >= 4
    assert messages == ["Http2ClosedError"] * len(messages)  # every connection refuses its first
    assert server.connections == len(messages)
    (_, error), *_ = canary.answers
    assert isinstance(error, ConnectionError)
    assert "went away before the call" in str(error)
