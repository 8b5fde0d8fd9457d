"""The real perf_analyzer (tritonclient 2.49) against the real tritonserver 2.51.

perf_analyzer is the yardstick ``tritonwatch sweep`` is compared with, so it must run
here in both protocols and report sane numbers for a model whose service time we know
(``batching``: 2 ms + 0.2 ms per row). Its HTTP mode fails with "Send failed since
rewinding of the data stream failed" only when something between it and Triton drops a
kept-alive connection after the request went out (docs/perf_analyzer.md); the last test
makes that happen with a loopback relay, so the note stays true.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from perf_analyzer_support import numbers, read_csv, run_perf_analyzer
from real_triton import RealTriton

pytestmark = pytest.mark.real

SERVICE_US = 2000
"""The batching model sleeps at least 2 ms per execution."""
PERCENTILES = ("p50 latency", "p90 latency", "p95 latency", "p99 latency")


def _address(server: RealTriton, protocol: str) -> str:
    port = server.http_port if protocol == "http" else server.grpc_port
    return f"127.0.0.1:{port}"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_measures_the_batching_model(
    real_triton: RealTriton, protocol: str, tmp_path: Path
) -> None:
    """Breaks if perf_analyzer stops running in this mode, or its CSV stops being µs."""
    out = tmp_path / "perf.csv"
    run = run_perf_analyzer("batching", _address(real_triton, protocol), protocol, out)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    header, rows = read_csv(out)
    assert header[:2] == ["Concurrency", "Inferences/Second"]
    (row,) = rows
    assert row["Concurrency"] == "1"
    assert float(row["Inferences/Second"]) > 0
    p50, p90, p95, p99 = numbers(row, PERCENTILES)
    assert SERVICE_US <= p50 <= p90 <= p95 <= p99
    assert float(row["Server Compute Infer"]) >= SERVICE_US
    # One request at a time cannot complete faster than one service time each.
    assert float(row["Inferences/Second"]) <= 1e6 / SERVICE_US


class DropReusedConnection:
    """A loopback relay to Triton's HTTP port that answers the first request of each
    connection and closes the connection, unanswered, on the second: what a proxy or a
    server's keep-alive timeout does when it races with the client's next request."""

    def __init__(self, target_port: int) -> None:
        self._target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with contextlib.suppress(OSError), client:  # a peer gone or timed out ends it quietly
            client.settimeout(30)
            self._relay(client)

    def _relay(self, client: socket.socket) -> None:
        with socket.create_connection(("127.0.0.1", self._target_port), 30) as upstream:
            request, rest = _read_message(client, b"")
            if request is None:
                return
            upstream.sendall(request)
            response, _ = _read_message(upstream, b"")
            if response is None:
                return
            client.sendall(response)
            _read_message(client, rest)  # the next request on the kept-alive connection…
            # …and close without an answer.

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)
        self._listener.close()


def _read_message(sock: socket.socket, buffer: bytes) -> tuple[bytes | None, bytes]:
    """One HTTP/1.1 message with a Content-Length body; (None, …) when the peer closed."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            return None, buffer
        buffer += chunk
    head, _, body = buffer.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return None, buffer
        body += chunk
    return head + b"\r\n\r\n" + body[:length], body[length:]


@pytest.fixture
def dropping_relay(real_triton: RealTriton) -> Iterator[DropReusedConnection]:
    relay = DropReusedConnection(real_triton.http_port)
    yield relay
    with contextlib.suppress(OSError):
        relay.close()


def test_perf_analyzer_http_cannot_resend_on_a_dropped_kept_alive_connection(
    dropping_relay: DropReusedConnection, tmp_path: Path
) -> None:
    """Breaks if perf_analyzer's HTTP client learns to resend its body (docs/perf_analyzer.md
    would then be out of date), or fails for another reason than the one documented."""
    run = run_perf_analyzer(
        "batching", f"127.0.0.1:{dropping_relay.port}", "http", tmp_path / "perf.csv"
    )
    assert run.returncode != 0
    assert "Send failed since rewinding of the data stream failed" in run.stdout + run.stderr
