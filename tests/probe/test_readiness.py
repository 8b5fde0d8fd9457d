"""The HTTP readiness probe turns every way a server can answer, or not, into an outcome.
Over TLS: tests/probe/test_outbound_tls.py; gRPC: tests/probe/test_grpc_readiness.py."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from support import ReadyEndpoint
from tritonwatch.probe.readiness import HttpReadinessProbe
from tritonwatch.records.observations import Outcome, ReadinessObservation


def _check(url: str, timeout: float = 2.0) -> ReadinessObservation:
    """One check by a fresh probe, its connection closed after."""
    probe = HttpReadinessProbe("t", url, timeout=timeout)
    try:
        return probe.check()
    finally:
        probe.close()


def test_ready_server_is_up(ready_endpoint: ReadyEndpoint) -> None:
    """A server answering ready is up, with a success outcome and a duration."""
    observation = _check(ready_endpoint.url)
    assert (observation.target, observation.ready, observation.outcome) == ("t", True, "success")
    assert 0 < observation.duration_seconds < 2.0


def test_not_ready_status_is_an_http_error(ready_endpoint: ReadyEndpoint) -> None:
    """A 503 readiness answer is not ready, an http_error saying HTTP 503."""
    ready_endpoint.status = 503
    observation = _check(ready_endpoint.url)
    assert (observation.ready, observation.outcome, observation.error) == (
        False,
        Outcome.HTTP_ERROR,
        "HTTP 503",
    )


def test_refused_connection_is_a_connection_error(closed_url: str) -> None:
    """A refused connection is a connection_error saying Connection refused."""
    observation = _check(closed_url)
    assert observation.outcome == Outcome.CONNECTION_ERROR
    assert observation.error == "Connection refused"


def test_hanging_server_is_a_timeout_bounded_by_the_probe_timeout(hanging_endpoint: str) -> None:
    """A server that never answers is a timeout ended by the probe's own timeout."""
    observation = _check(hanging_endpoint, timeout=0.3)
    assert observation.outcome == Outcome.TIMEOUT
    assert 0.25 < observation.duration_seconds < 2.0


class KeepAliveEndpoint:
    """An HTTP/1.1 keep-alive readiness endpoint that remembers each request's path and
    the client port it came from."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                endpoint.seen.append((self.path, self.client_address[1]))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def keep_alive() -> Iterator[KeepAliveEndpoint]:
    endpoint = KeepAliveEndpoint()
    yield endpoint
    endpoint.server.shutdown()
    endpoint.server.server_close()


def test_the_connection_is_kept_and_a_path_prefix_kept(keep_alive: KeepAliveEndpoint) -> None:
    """Breaks if each check opens a new connection to a keep-alive server, or the URL's
    path (a proxy's prefix) is left out of the request."""
    probe = HttpReadinessProbe("t", f"http://127.0.0.1:{keep_alive.port}/triton/", 2.0)
    try:
        observations = [probe.check() for _ in range(3)]
    finally:
        probe.close()
    assert [(o.ready, o.outcome) for o in observations] == [(True, Outcome.SUCCESS)] * 3
    assert [path for path, _ in keep_alive.seen] == ["/triton/v2/health/ready"] * 3
    assert len({port for _, port in keep_alive.seen}) == 1


def test_a_connection_closed_while_idle_is_replaced_not_failed(
    keep_alive: KeepAliveEndpoint,
) -> None:
    """Breaks if a keep-alive connection that ended between checks fails the next check
    instead of being replaced by a new one."""
    probe = HttpReadinessProbe("t", f"http://127.0.0.1:{keep_alive.port}", 2.0)
    try:
        assert probe.check().ready
        kept = probe.socket
        assert kept is not None
        kept.shutdown(socket.SHUT_RDWR)  # the connection ends under the idle probe
        again = probe.check()
    finally:
        probe.close()
    assert (again.ready, again.outcome, again.error) == (True, Outcome.SUCCESS, "")
    assert len({port for _, port in keep_alive.seen}) == 2


def test_an_answer_that_is_no_http_is_an_http_error() -> None:
    """Breaks if bytes that are no HTTP/1.1 answer are read as one, raise out of the
    probe, or hang it."""
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def answer_garbage() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00 not HTTP\r\n\r\n")

        threading.Thread(target=answer_garbage, daemon=True).start()
        observation = _check(f"http://127.0.0.1:{listener.getsockname()[1]}")
    assert (observation.outcome, observation.ready) == (Outcome.HTTP_ERROR, False)
    assert observation.error.startswith("not HTTP/1.1: bad status line")
