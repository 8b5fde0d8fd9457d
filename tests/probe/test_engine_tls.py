"""TLS spoken by the canary engine (probe/canary/engine_tls.py) around its HTTP/1.1 and HTTP/2 wires.

First the wire alone, driven the way the engine drives it (its bytes written, each read
fed, what is owed sent) against loopback servers that speak TLS with Python's ``ssl``;
then the engine itself, and a canary whose target is ``https://`` or ``grpcs://``, against
the simulator's gRPC server (grpcio's own TLS) and a TLS-terminating proxy. Real: the
certificates come from the ``openssl`` command (tests/tls_support.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any, cast

import hpack
import pytest
from engine_support import (
    OK,
    REQUEST,
    Behaviour,
    RawServer,
    Recorder,
    SteppedClock,
    raw_server,
    read_frame,
    read_request,
    until,
    wake,
)

from tls_support import Pki, TlsProxy, make_pki
from tritonwatch.common.client_tls import ClientTLS
from tritonwatch.probe.canary.clients import client_for
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.engine_channels import Channel
from tritonwatch.probe.canary.engine_stream import StreamAnswer, StreamWire
from tritonwatch.probe.canary.engine_tls import TlsSettings, TlsWire
from tritonwatch.probe.canary.engine_wires import GrpcAnswer, GrpcWire, Http1Wire, RawAnswer
from tritonwatch.probe.canary.model_canary import ModelCanary
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.records.observations import Outcome
from tritonwatch.sim.server import GrpcTLS, Simulator
from tritonwatch.state.canary_board import CanaryBoard
from tritonwatch.wire import http2
from tritonwatch.wire.http2 import frame_bytes, grpc_unary_request
from tritonwatch.wire.limits import HttpRequest

pytestmark = pytest.mark.real

STAMP = 1234.5
"""The arrival stamp each read is fed with: the answer must carry its last read's."""
GRPC_CALL = grpc_unary_request("127.0.0.1:1", "/inference.GRPCInferenceService/ModelInfer",
                               b"ask", 2.0)  # fmt: skip
PING_ACK = bytes((http2.PING,)) + b"idleping"
PLAIN_OK = Http1Wire(HttpRequest(REQUEST)).feed(OK, STAMP)
"""What the HTTP/1.1 wire makes of the answer in clear: over TLS it must be the same."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _server_context(pki: Pki, *, mutual: bool = False) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    context.set_alpn_protocols(["h2", "http/1.1"])
    if mutual:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(pki.ca)
    return context


def over_tls(behaviour: Behaviour, context: ssl.SSLContext) -> Behaviour:
    """``behaviour`` on the TLS side of each connection; the chosen ALPN protocol is
    noted in ``server.requests`` as ``alpn:NAME`` first."""

    def serve(conn: socket.socket, server: RawServer) -> None:
        with context.wrap_socket(conn, server_side=True) as secure:
            server.requests.append(f"alpn:{secure.selected_alpn_protocol()}".encode())
            behaviour(secure, server)

    return serve


def answer_then_close_notify(done: threading.Event) -> Behaviour:
    """One answer, then TLS's close_notify (the server ending the session politely)."""

    def behaviour(conn: socket.socket, server: RawServer) -> None:
        assert isinstance(conn, ssl.SSLSocket)
        read_request(conn, bytearray())
        conn.sendall(OK)
        conn.settimeout(1.0)
        with contextlib.suppress(OSError):
            conn.unwrap()  # sends close_notify, then waits for the client's (none comes)
        done.set()
        time.sleep(1.0)

    return behaviour


def grpc_server(idle_ping: tuple[threading.Event, threading.Event] | None = None) -> Behaviour:
    """A unary gRPC server over HTTP/2: each call's message is ``ok`` and its stream id.
    With ``idle_ping`` (go, sent): after the first answer, once ``go`` is set, a PING,
    then ``sent`` is set (so it comes while the connection idles, in a read of its own)."""

    def behaviour(conn: socket.socket, server: RawServer) -> None:
        encoder, buffer = hpack.Encoder(), bytearray()
        while len(buffer) < len(http2.PREFACE):
            buffer += conn.recv(65536)
        del buffer[: len(http2.PREFACE)]
        conn.sendall(frame_bytes(http2.SETTINGS, 0, 0))
        while (got := read_frame(conn, buffer)) is not None:
            kind, flags, stream, payload = got
            server.requests.append(bytes((kind,)) + payload)
            if kind != http2.DATA or not flags & http2.END_STREAM:
                continue
            head = encoder.encode([(":status", "200"), ("content-type", "application/grpc")])
            trailers = encoder.encode([("grpc-status", "0")])
            message = b"ok%d" % stream
            conn.sendall(
                frame_bytes(http2.HEADERS, http2.END_HEADERS, stream, head)
                + frame_bytes(http2.DATA, 0, stream, struct.pack(">BI", 0, len(message)) + message)
                + frame_bytes(http2.HEADERS, http2.END_HEADERS | http2.END_STREAM, stream, trailers)
            )
            if idle_ping is not None and stream == 1:
                go, sent = idle_ping
                go.wait(10)
                conn.sendall(frame_bytes(http2.PING, 0, 0, b"idleping"))
                sent.set()

    return behaviour


def _settings(pki: Pki, tls: ClientTLS | None = None, *, grpc: bool = False,
              name: str = "127.0.0.1") -> TlsSettings:  # fmt: skip
    tls = tls if tls is not None else ClientTLS(pki.ca)
    return TlsSettings(tls.ssl_context(("h2",) if grpc else ()), name)


class Driver:
    """Drives a wire on a blocking socket as the engine does: ``start()`` written, each
    read fed (stamped :data:`STAMP`), what is owed after a read without an answer sent."""

    def __init__(self, port: int, wire: TlsWire) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.wire = wire
        self.reads = 0

    def exchange(self) -> RawAnswer:
        self.sock.sendall(self.wire.start())
        while True:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionResetError("closed")
            self.reads += 1
            answer = self.wire.feed(data, STAMP)
            if answer is not None:
                owed = self.wire.take_output()
                if owed:
                    self.sock.sendall(owed)
                return answer
            owed = self.wire.take_output()
            if owed:
                self.sock.sendall(owed)

    def idle_read(self) -> bool:
        """Reads what came while idle into ``idle_data`` (as the engine does on reuse)."""
        data = self.sock.recv(65536)
        return bool(data) and self.wire.idle_data(data)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def drivers() -> Iterator[list[Driver]]:
    made: list[Driver] = []
    yield made
    for driver in made:
        driver.close()


def _drive(drivers: list[Driver], port: int, wire: TlsWire) -> Driver:
    driver = Driver(port, wire)
    drivers.append(driver)
    return driver


def test_http1_over_tls_handshakes_then_answers_twice_on_one_connection(
    pki: Pki, drivers: list[Driver]
) -> None:
    """Fails if the request goes out before the handshake ends (the server would read
    garbage), if the handshake's round trips stall, if the answer is not the inner
    wire's (status, headers, body) with its last read's stamp, or if a second request
    cannot go on the same connection."""
    wire = _settings(pki).wrap(Http1Wire(HttpRequest(REQUEST)))
    assert wire.handshaking
    with raw_server(over_tls(_answer_each_tls(), _server_context(pki))) as server:
        driver = _drive(drivers, server.port, wire)
        first = driver.exchange()
        assert not wire.handshaking and wire.reusable()
        second = driver.exchange()
    assert first == PLAIN_OK
    assert second[:3] == first[:3] and second[3] == STAMP
    assert server.requests == [b"alpn:None", REQUEST, REQUEST]  # HTTP/1.1: no ALPN asked
    assert server.connections == 1


def _answer_each_tls() -> Behaviour:
    def behaviour(conn: socket.socket, server: RawServer) -> None:
        buffer = bytearray()
        while (request := read_request(conn, buffer)) is not None:
            server.requests.append(request)
            conn.sendall(OK)

    return behaviour


def test_grpc_over_tls_negotiates_h2_and_keeps_its_session_between_calls(
    pki: Pki, drivers: list[Driver]
) -> None:
    """Fails if gRPC's TLS does not offer ALPN h2, if the HTTP/2 session's state is lost
    between calls (stream ids 1 then 3), or if a PING that came while the connection
    idled makes it unusable or goes unacknowledged."""
    go, pinged = threading.Event(), threading.Event()
    wire = _settings(pki, grpc=True).wrap(GrpcWire(GRPC_CALL))
    with raw_server(over_tls(grpc_server((go, pinged)), _server_context(pki))) as server:
        driver = _drive(drivers, server.port, wire)
        first = driver.exchange()
        go.set()
        assert pinged.wait(10)
        assert driver.idle_read()  # the PING, decrypted and taken by the HTTP/2 wire
        assert wire.reusable()
        second = driver.exchange()  # its bytes carry the PING's acknowledgement
        deadline = time.monotonic() + 10
        while PING_ACK not in server.requests and time.monotonic() < deadline:
            time.sleep(0.01)
    assert wire.alpn == "h2"
    assert server.requests[0] == b"alpn:h2"
    assert isinstance(first, GrpcAnswer) and isinstance(second, GrpcAnswer)
    assert (first.reply.status, first.reply.payload, first.received) == (0, b"ok1", STAMP)
    assert (second.reply.status, second.reply.payload) == (0, b"ok3")
    assert PING_ACK in server.requests
    assert server.connections == 1


def test_the_servers_close_notify_while_idle_ends_the_connections_use(
    pki: Pki, drivers: list[Driver]
) -> None:
    """Fails if a connection the server closed with close_notify is taken as usable
    (the next request would be lost on it)."""
    closed = threading.Event()
    wire = _settings(pki).wrap(Http1Wire(HttpRequest(REQUEST)))
    with raw_server(over_tls(answer_then_close_notify(closed), _server_context(pki))) as server:
        driver = _drive(drivers, server.port, wire)
        assert driver.exchange()[0] == 200
        assert closed.wait(10)
        assert not driver.idle_read()
    assert not wire.reusable()


def test_session_tickets_after_the_handshake_are_no_answer_and_no_harm(pki: Pki) -> None:
    """Fails if a TLS 1.3 record that carries no plaintext (the NewSessionTicket a
    server sends after the handshake) is handed to the inner wire, taken for an answer,
    or makes the connection unusable. In memory, so the ticket can be fed on its own."""
    server_context = _server_context(pki)
    server_in, server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_context.wrap_bio(server_in, server_out, server_side=True)
    wire = _settings(pki).wrap(Http1Wire(HttpRequest(REQUEST)))
    server_in.write(wire.start())  # ClientHello
    with pytest.raises(ssl.SSLWantReadError):
        server.do_handshake()
    assert wire.feed(server_out.read(), STAMP) is None  # ServerHello … Finished
    server_in.write(wire.take_output())  # the client's Finished, and the request behind it
    server.do_handshake()
    tickets = server_out.read()
    assert tickets and server.version() == "TLSv1.3"
    assert server.read(65536) == REQUEST
    assert wire.feed(tickets, STAMP) is None
    server.write(OK)
    assert wire.feed(server_out.read(), STAMP) == PLAIN_OK
    assert wire.reusable()


@pytest.mark.parametrize(
    ("client", "server_mutual", "name", "reason"),
    [
        ("other_ca", False, "127.0.0.1", "certificate verify failed"),
        ("ca", False, "triton.example", "certificate verify failed"),
        ("ca", True, "127.0.0.1", "certificate required"),
    ],
    ids=["unknown-ca", "wrong-name", "no-client-certificate"],
)
def test_a_handshake_that_fails_verification_raises_an_ssl_error(
    pki: Pki, drivers: list[Driver], client: str, server_mutual: bool, name: str, reason: str
) -> None:
    """Fails if the engine's TLS trusts a certificate the settings do not (another CA, a
    name the certificate lacks) or carries on when the server refuses it for want of a
    client certificate: each must be an ``ssl.SSLError`` (a connection error)."""
    tls = ClientTLS(getattr(pki, client))
    wire = _settings(pki, tls, name=name).wrap(Http1Wire(HttpRequest(REQUEST)))
    context = _server_context(pki, mutual=server_mutual)
    with raw_server(over_tls(_answer_each_tls(), context)) as server:
        driver = _drive(drivers, server.port, wire)
        with pytest.raises(ssl.SSLError, match=reason):
            driver.exchange()
    assert REQUEST not in server.requests


def test_mutual_tls_presents_the_configured_client_certificate(
    pki: Pki, drivers: list[Driver]
) -> None:
    """Fails if the engine's context leaves out the client certificate of the target's
    ``tls`` settings (a mutual-TLS Triton would refuse every canary)."""
    tls = ClientTLS(pki.ca, pki.client_cert, pki.client_key)
    wire = _settings(pki, tls).wrap(Http1Wire(HttpRequest(REQUEST)))
    with raw_server(over_tls(_answer_each_tls(), _server_context(pki, mutual=True))) as server:
        answer = _drive(drivers, server.port, wire).exchange()
    assert answer[0] == 200
    assert server.requests[1:] == [REQUEST]


class _Stream(StreamWire):
    """A streaming wire that has read nothing; its failure answer is a marker."""

    def __init__(self) -> None:
        self.marker = StreamAnswer(cast(Any, "the stream's clock"), None, None)

    def start(self) -> bytes:
        return REQUEST

    def feed(self, data: bytes, received: float) -> StreamAnswer | None:
        return None

    def take_output(self) -> bytes:
        return b""

    def reusable(self) -> bool:
        return True

    def idle_data(self, data: bytes) -> bool:
        return True

    def failed(self, error: BaseException) -> StreamAnswer:
        return self.marker


def test_a_streaming_wire_over_tls_is_still_read_as_a_stream(pki: Pki) -> None:
    """Fails if wrapping a streaming wire hides that it streams (the engine would let
    its reads wait in the kernel, one stamp for many tokens) or loses the tokens a
    failed stream had read (its ``failed`` answer)."""
    inner = _Stream()
    wire = _settings(pki).wrap(inner)
    assert isinstance(wire, StreamWire)
    assert wire.failed(ConnectionResetError()) is inner.marker


# -- the engine ---------------------------------------------------------------------------


def _lockstep(port: int, canary: Recorder, sends: int, request: bytes | http2.UnaryRequest,
              tls: TlsSettings, *, max_in_flight: int = 4) -> None:  # fmt: skip
    """Runs the engine for ``canary`` over ``tls`` on a :class:`SteppedClock`: the clock
    moves to the next send only once every request sent has its answer, so each send
    finds the connections as the last answer left them, on a host however slow."""
    clock = SteppedClock()
    engine = CanaryEngine(clock=clock)
    first = clock.now + canary.gap

    async def main() -> None:
        sent = HttpRequest(request) if isinstance(request, bytes) else request
        serving = engine.serve(canary, "127.0.0.1", port, sent, timeout=2.0,
                               max_in_flight=max_in_flight, first_send=first, tls=tls)  # fmt: skip
        task = asyncio.create_task(serving)
        for k in range(sends):
            clock.now = first + k * canary.gap
            wake(engine)
            await until(lambda k=k: len(canary.answers) == len(canary.asked) + canary.refused
                        == k + 1, f"send {k + 1} and its answer", limit=20)  # fmt: skip
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    try:
        asyncio.run(main())
    finally:
        engine.stop()


def test_the_engine_sends_https_canaries_on_one_kept_tls_connection(pki: Pki) -> None:
    """Fails if ``serve(tls=...)`` sends in clear, if the engine does not carry a
    handshake through its round trips, or if it opens a TLS connection per request."""
    canary = Recorder(gap=0.0625)
    with raw_server(over_tls(_answer_each_tls(), _server_context(pki))) as server:
        _lockstep(server.port, canary, 4, REQUEST, _settings(pki))
    assert [answer for _, answer in canary.answers] == [
        (*PLAIN_OK[:3], answer[3]) for _, answer in canary.answers
    ]
    assert server.requests == [b"alpn:None"] + [REQUEST] * 4
    assert server.connections == 1


def test_the_engine_sends_grpcs_canaries_on_one_http2_session(pki: Pki) -> None:
    """Fails if the engine's gRPC over TLS loses the HTTP/2 session between calls or
    opens a connection per call."""
    canary = Recorder(gap=0.0625)
    with raw_server(over_tls(grpc_server(), _server_context(pki))) as server:
        _lockstep(server.port, canary, 3, GRPC_CALL, _settings(pki, grpc=True))
    replies = [answer for _, answer in canary.answers]
    assert all(isinstance(reply, GrpcAnswer) for reply in replies)
    assert [r.reply.payload for r in replies if isinstance(r, GrpcAnswer)] == [b"ok1", b"ok3",
                                                                             b"ok5"]  # fmt: skip
    assert server.requests[0] == b"alpn:h2"
    assert server.connections == 1


def test_an_untrusted_server_is_a_connection_error_per_request_and_the_engine_goes_on(
    pki: Pki,
) -> None:
    """Fails if a failed handshake crashes the engine's thread (the next request would
    never be answered), is anything but an ``ssl.SSLError`` (a connection error), or
    lets the request out to an unverified server."""
    canary = Recorder(gap=0.0625)
    untrusted = _settings(pki, ClientTLS(pki.other_ca))
    with raw_server(over_tls(_answer_each_tls(), _server_context(pki))) as server:
        _lockstep(server.port, canary, 3, REQUEST, untrusted)
    errors = [answer for _, answer in canary.answers]
    assert [type(e).__name__ for e in errors] == ["SSLCertVerificationError"] * 3
    assert REQUEST not in server.requests
    assert server.connections == 3  # each failed connection closed, a new one tried


def test_a_handshake_is_read_at_once_even_when_answers_may_wait_in_the_kernel(
    pki: Pki,
) -> None:
    """Fails if a new TLS connection's reads are left for a later collection (its
    request would wait up to ANSWER_WAIT for the server's handshake to be read), while a
    plaintext one's answer still may wait."""
    engine = CanaryEngine(clock=SteppedClock())
    listener = socket.create_server(("127.0.0.1", 0))
    address = (socket.AF_INET, listener.getsockname())
    try:
        request = HttpRequest(REQUEST)
        secure = Channel(Recorder(gap=2.0), address, request, 2.0, 1, tls=_settings(pki))
        plain = Channel(Recorder(gap=2.0), address, request, 2.0, 1)
        for channel in (secure, plain):
            engine._start(channel, 1000.0, 1000.0, unhurried=True)
        waits = {type(e.wire).__name__: e.collect_by for _, e in engine._exchanges.values()}
    finally:
        for channel in (secure, plain):
            engine._close_channel(channel)
        listener.close()
    assert waits == {"TlsWire": 0.0, "Http1Wire": pytest.approx(1000.5)}


# -- a canary whose target is https:// or grpcs:// -----------------------------------------


@pytest.fixture(scope="module")
def sim(pki: Pki) -> Iterator[Simulator]:
    tls = GrpcTLS(pki.server_cert, pki.server_key, root_cert=pki.ca, mutual=True)
    with Simulator(grpc_tls=tls, metrics_interval_s=0.2) as simulator:
        yield simulator


@pytest.fixture(scope="module")
def api_proxy(sim: Simulator, pki: Pki) -> Iterator[TlsProxy]:
    with TlsProxy(int(sim.http_url.rsplit(":", 1)[1]), pki, mutual=True) as proxy:
        yield proxy


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_tls_canary_is_sent_by_the_engine_and_succeeds(
    sim: Simulator, api_proxy: TlsProxy, pki: Pki, protocol: str
) -> None:
    """Fails if an ``https://`` or ``grpcs://`` canary is left to the library path (the
    engine sent nothing), or if the engine's TLS does not interoperate with a real TLS
    stack (grpcio's, mutual, ALPN h2; a proxy's for HTTP): every answer a success."""
    tls = ClientTLS(pki.ca, pki.client_cert, pki.client_key)
    http_url, grpc_url = f"https://{api_proxy.base}", f"grpcs://{sim.grpc_url}"
    plan = CanaryPlan("t", "simple", "", protocol, http_url, grpc_url, 20.0, False, 5.0, 1,
                      "zero", tls=tls)  # fmt: skip
    stats = CanaryBoard()
    stats.declare([plan.key])
    engine = CanaryEngine()

    async def run() -> dict[Outcome, int]:
        client = client_for(protocol, http_url, grpc_url, tls)
        task = asyncio.create_task(ModelCanary(plan, client, stats, engine=engine).run())
        try:
            await until(lambda: sum(stats.snapshot(0)[0].outcomes.values()) >= 5,
                        "five outcomes", limit=30)  # fmt: skip
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()
        return {o: n for o, n in stats.snapshot(0)[0].outcomes.items() if n}

    try:
        outcomes = asyncio.run(run())
    finally:
        engine.stop()
    assert set(outcomes) == {Outcome.SUCCESS}
    assert engine.sent >= outcomes[Outcome.SUCCESS]
