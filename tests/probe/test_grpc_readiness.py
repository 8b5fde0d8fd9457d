"""gRPC readiness on the wire code's HTTP/2, against real gRPC servers (grpcio's and
Triton's): every way ``ServerReady`` can answer, or not, is an outcome. Over TLS:
tests/probe/test_outbound_tls.py."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent import futures

import grpc
import pytest

from real_triton import RealTriton
from support import wait_until
from tritonwatch.probe.readiness import GrpcReadinessProbe, HttpReadinessProbe
from tritonwatch.records.observations import Outcome, ReadinessObservation

pytestmark = pytest.mark.real

Behaviour = Callable[[bytes, grpc.ServicerContext], bytes]


@pytest.fixture
def grpc_server() -> Iterator[Callable[[Behaviour], str]]:
    """A real grpcio server whose ``ServerReady`` runs the behaviour given; its URL."""
    servers: list[grpc.Server] = []

    def start(behaviour: Behaviour) -> str:
        handler = grpc.method_handlers_generic_handler(
            "inference.GRPCInferenceService",
            {"ServerReady": grpc.unary_unary_rpc_method_handler(behaviour)},
        )  # no (de)serializers: the handler gets and gives the message's bytes
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"grpc://127.0.0.1:{port}"

    yield start
    for server in servers:
        server.stop(None)


def _check(url: str, timeout: float = 2.0) -> ReadinessObservation:
    """One check by a fresh probe, its connection closed after."""
    probe = GrpcReadinessProbe("t", url, timeout=timeout)
    try:
        return probe.check()
    finally:
        probe.close()


def _ready(flag: bool) -> Behaviour:
    return lambda request, context: b"\x08\x01" if flag else b""


def test_a_ready_server_is_up_and_the_connection_is_kept(
    grpc_server: Callable[[Behaviour], str],
) -> None:
    """Breaks if ``ready: true`` is not read as up, the request is no valid
    ServerReady call, or each check opens a new connection."""
    calls: list[bytes] = []
    peers: set[str] = set()

    def behaviour(request: bytes, context: grpc.ServicerContext) -> bytes:
        calls.append(request)
        peers.add(context.peer())
        return b"\x08\x01"

    probe = GrpcReadinessProbe("t", grpc_server(behaviour), timeout=2.0)
    try:
        observations = [probe.check() for _ in range(3)]
    finally:
        probe.close()
    assert [(o.target, o.ready, o.outcome, o.error) for o in observations] == [
        ("t", True, Outcome.SUCCESS, "")
    ] * 3
    assert all(0 < o.duration_seconds < 2.0 for o in observations)
    assert calls == [b""] * 3  # the empty ServerReadyRequest
    assert len(peers) == 1


def test_ready_false_is_not_ready(grpc_server: Callable[[Behaviour], str]) -> None:
    """Breaks if proto3's left-out ``false`` (an empty answer) is read as ready."""
    observation = _check(grpc_server(_ready(False)))
    assert (observation.ready, observation.outcome, observation.error) == (
        False,
        Outcome.GRPC_ERROR,
        "server not ready",
    )


@pytest.mark.parametrize(
    ("code", "outcome", "error"),
    [
        (grpc.StatusCode.UNAVAILABLE, Outcome.CONNECTION_ERROR, "StatusCode.UNAVAILABLE: down"),
        (grpc.StatusCode.INTERNAL, Outcome.GRPC_ERROR, "StatusCode.INTERNAL: down"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, Outcome.TIMEOUT, "StatusCode.DEADLINE_EXCEEDED: down"),
    ],
)
def test_a_failed_call_says_its_status(
    grpc_server: Callable[[Behaviour], str], code: grpc.StatusCode, outcome: str, error: str
) -> None:
    """Breaks if a gRPC status is taken for an answer, or mapped to the wrong outcome
    (UNAVAILABLE is a server that cannot serve: as a refused connection)."""

    def fail(request: bytes, context: grpc.ServicerContext) -> bytes:
        context.abort(code, "down")
        raise AssertionError("unreachable")

    observation = _check(grpc_server(fail))
    assert (observation.ready, observation.outcome, observation.error) == (False, outcome, error)


def test_a_refused_connection_is_a_connection_error(closed_url: str) -> None:
    """Breaks if a refused connect raises out of the probe or says more than why."""
    url = closed_url.replace("http://", "grpc://")
    observation = _check(url)
    assert (observation.outcome, observation.error) == (
        Outcome.CONNECTION_ERROR,
        "Connection refused",
    )


def test_a_server_that_never_answers_is_a_timeout_bounded_by_the_probe(
    hanging_endpoint: str,
) -> None:
    """Breaks if the probe waits past its own timeout for an answer that never comes."""
    url = hanging_endpoint.replace("http://", "grpc://")
    observation = _check(url, timeout=0.3)
    assert observation.outcome == Outcome.TIMEOUT
    assert 0.25 < observation.duration_seconds < 2.0


def test_an_http1_server_on_the_port_is_no_grpc() -> None:
    """Breaks if bytes that are no HTTP/2 are read as an answer, or hang the probe."""
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def answer_http1() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

        threading.Thread(target=answer_http1, daemon=True).start()
        url = f"grpc://127.0.0.1:{listener.getsockname()[1]}"
        observation = _check(url)
    assert (observation.outcome, observation.ready) == (Outcome.GRPC_ERROR, False)
    assert observation.error.startswith("not gRPC: ")
    assert observation.duration_seconds < 2.0


def test_a_connection_closed_while_idle_is_replaced_not_failed(
    grpc_server: Callable[[Behaviour], str],
) -> None:
    """Breaks if a connection that ended between checks fails the next check instead of
    being replaced by a new one."""
    peers: list[str] = []

    def behaviour(request: bytes, context: grpc.ServicerContext) -> bytes:
        peers.append(context.peer())
        return b"\x08\x01"

    probe = GrpcReadinessProbe("t", grpc_server(behaviour), timeout=2.0)
    try:
        assert probe.check().ready
        kept = probe.socket
        assert kept is not None
        kept.shutdown(socket.SHUT_RDWR)  # the connection ends under the idle probe
        again = probe.check()
    finally:
        probe.close()
    assert (again.ready, again.outcome, again.error) == (True, Outcome.SUCCESS, "")
    assert len(set(peers)) == 2


def test_a_check_after_a_failure_connects_anew() -> None:
    """Breaks if a connection whose call failed (here: no answer in time) is used again
    instead of a new one."""
    accepted: list[socket.socket] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def accept() -> None:
            while len(accepted) < 2:
                accepted.append(listener.accept()[0])  # and never answer

        threading.Thread(target=accept, daemon=True).start()
        probe = GrpcReadinessProbe("t", f"grpc://127.0.0.1:{listener.getsockname()[1]}", 0.3)
        try:
            outcomes = [probe.check().outcome for _ in range(2)]
        finally:
            probe.close()
        wait_until(lambda: len(accepted) == 2, 5.0, "the second check's connection")
        for conn in accepted:
            conn.close()
    assert outcomes == [Outcome.TIMEOUT, Outcome.TIMEOUT]


def test_real_triton_is_ready_as_tritonclient_says(real_triton: RealTriton) -> None:
    """Breaks if either probe's call is not one real Triton answers as ready on a kept
    connection, where tritonclient says it is ready (the HTTP probe's own tests are in
    tests/probe/test_readiness.py)."""
    import tritonclient.grpc as grpcclient

    ours = [
        GrpcReadinessProbe("t", real_triton.grpc_url, timeout=5.0),
        HttpReadinessProbe("t", real_triton.http_url, timeout=5.0),
    ]
    theirs = grpcclient.InferenceServerClient(real_triton.grpc_url.partition("://")[2])
    try:
        mine, kept = [], []
        for probe in ours:
            first = probe.check()
            connection = probe.socket
            mine.append([first, probe.check()])
            kept.append(connection is not None and probe.socket is connection)
        reference = theirs.is_server_ready(client_timeout=5.0)
    finally:
        for probe in ours:
            probe.close()
        theirs.close()
    assert reference is True
    assert [[(o.ready, o.outcome, o.error) for o in two] for two in mine] == [
        [(True, Outcome.SUCCESS, "")] * 2
    ] * 2
    assert kept == [True, True]  # Triton keeps both connections between checks


READINESS_IMPORTS = """
import sys
from tritonwatch.config import parse_config
from tritonwatch.probe.readiness import readiness_probe_for
targets = [("plain", "grpc"), ("secure", "grpcs"), ("http", "http"), ("https", "https")]
text = "targets:\\n" + "".join(
    f"  - {{name: {name}, url: '{scheme}://127.0.0.1:{port}'}}\\n" for name, scheme in targets
)
for target in parse_config(text, "test.yaml").targets:
    probe = readiness_probe_for(target, 1.0)
    print(type(probe).__name__, probe.check().outcome)
    probe.close()
print(sorted(m for m in sys.modules if m.split(".")[0] in ("grpc", "tritonclient")))
"""


def test_readiness_imports_neither_grpc_nor_tritonclient(closed_url: str) -> None:
    """Breaks if checking any target's readiness (gRPC or HTTP, in clear or over TLS)
    loads ``grpc`` or ``tritonclient`` (tens of MiB the daemon otherwise never needs)."""
    port = closed_url.rpartition(":")[2]
    code = f"port = {port}\n{READINESS_IMPORTS}"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.splitlines() == [
        "GrpcReadinessProbe connection_error",
        "GrpcReadinessProbe connection_error",
        "HttpReadinessProbe connection_error",
        "HttpReadinessProbe connection_error",
        "[]",
    ]
