"""Plaintext gRPC readiness on the h2c client, against real gRPC servers (grpcio's and
Triton's): every way ``ServerReady`` can answer, or not, is an outcome."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from concurrent import futures

import grpc
import pytest

from real_triton import RealTriton
from tritonwatch.config import parse_config
from tritonwatch.probe.readiness import (
    GrpcReadinessProbe,
    H2cReadinessProbe,
    readiness_probe_for,
)
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
    probe = H2cReadinessProbe("t", url, timeout=timeout)
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

    probe = H2cReadinessProbe("t", grpc_server(behaviour), timeout=2.0)
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


def test_a_check_after_a_failure_reconnects(grpc_server: Callable[[Behaviour], str]) -> None:
    """Breaks if a connection the server closed is used again instead of a new one."""
    state = {"ready": True}
    server_url = grpc_server(lambda request, context: b"\x08\x01" if state["ready"] else b"")
    probe = H2cReadinessProbe("t", server_url, timeout=2.0)
    try:
        assert probe.check().ready
        assert probe._socket is not None
        probe._socket.shutdown(socket.SHUT_RDWR)  # the connection breaks under the probe
        failed = probe.check()
        again = probe.check()
    finally:
        probe.close()
    assert not failed.ready
    assert failed.outcome == Outcome.CONNECTION_ERROR
    assert again.ready


def test_real_triton_is_ready_over_h2c(real_triton: RealTriton) -> None:
    """Breaks if the h2c call is no ServerReady real Triton answers as tritonclient's does."""
    ours = H2cReadinessProbe("t", real_triton.grpc_url, timeout=5.0)
    theirs = GrpcReadinessProbe("t", real_triton.grpc_url, timeout=5.0)
    try:
        mine, reference = ours.check(), theirs.check()
    finally:
        ours.close()
        theirs.close()
    assert (mine.ready, mine.outcome) == (reference.ready, reference.outcome) == (True, "success")


def test_plaintext_grpc_targets_get_the_h2c_probe_tls_ones_tritonclients() -> None:
    """Breaks if a grpc:// target loads tritonclient's gRPC for readiness, or a
    grpcs:// one is checked in clear."""
    config = parse_config(
        """targets:
  - {name: plain, url: "grpc://127.0.0.1:8001"}
  - {name: secure, url: "grpcs://127.0.0.1:8001"}
  - {name: http, url: "http://127.0.0.1:8000"}
""",
        "test.yaml",
    )
    kinds = [type(readiness_probe_for(t, 1.0)).__name__ for t in config.targets]
    assert kinds == ["H2cReadinessProbe", "GrpcReadinessProbe", "HttpReadinessProbe"]
