"""A loopback stand-in for Triton's repository API whose index answer can be held.

:class:`IndexServer` answers what the daemon asks a discovering target — the repository
index (every model READY), each model's metadata and config, ``/v2/health/ready`` and
an empty ``/metrics`` — and refuses inference (the canaries' sends fail; what these
tests read is which canaries run). :meth:`IndexServer.hold_next_index` makes the next
index read wait until the test releases it: a slow index, without a sleep.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOLD_LIMIT_SECONDS = 30.0
"""A held answer is let go after this even if the test never released it."""


class IndexServer:
    """The models it serves are :attr:`models` (change them between reads)."""

    def __init__(self, models: list[str]) -> None:
        self.models = list(models)
        self.index_reads = 0
        self._hold: tuple[threading.Event, threading.Event] | None = None
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> IndexServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def hold_next_index(self) -> threading.Event:
        """Holds the next index read until :meth:`release`; returns an event set when
        that read has arrived (and is being held)."""
        arrived, released = threading.Event(), threading.Event()
        with self._lock:
            self._hold = (arrived, released)
        return arrived

    def release(self) -> None:
        with self._lock:
            hold, self._hold = self._hold, None
        if hold is not None:
            hold[1].set()

    def _index(self) -> list[dict[str, str]]:
        with self._lock:
            self.index_reads += 1
            hold = self._hold
            if hold is not None and not hold[0].is_set():
                hold[0].set()  # this read is the held one; later ones are not
            else:
                hold = None
            models = list(self.models)
        if hold is not None:
            hold[1].wait(HOLD_LIMIT_SECONDS)
        return [{"name": name, "version": "1", "state": "READY"} for name in models]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                pass

            def _answer(self, status: int, body: object, kind: str = "application/json") -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                parts = path.strip("/").split("/")
                if path == "/v2":
                    self._answer(200, {"name": "index-server", "extensions": []})
                elif path == "/v2/health/ready":
                    self._answer(200, b"", "text/plain")
                elif path == "/metrics":
                    self._answer(200, b"", "text/plain; version=0.0.4")
                elif len(parts) == 3 and parts[:2] == ["v2", "models"]:
                    self._answer(200, _metadata(parts[2]))
                elif len(parts) == 4 and parts[:2] == ["v2", "models"] and parts[3] == "config":
                    self._answer(200, _config(parts[2]))
                else:
                    self._answer(404, {"error": "not found"})

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path == "/v2/repository/index":
                    self._answer(200, server._index())
                else:
                    self._answer(400, {"error": "this stand-in does not infer"})

        return Handler


def _tensor(name: str) -> dict[str, Any]:
    return {"name": name, "datatype": "FP32", "shape": [-1, 4]}


def _metadata(model: str) -> dict[str, Any]:
    return {
        "name": model,
        "versions": ["1"],
        "platform": "python",
        "inputs": [_tensor("INPUT0")],
        "outputs": [_tensor("OUTPUT0")],
    }


def _config(model: str) -> dict[str, Any]:
    dims = {"data_type": "TYPE_FP32", "dims": [4]}
    return {
        "name": model,
        "max_batch_size": 8,
        "input": [{"name": "INPUT0", **dims}],
        "output": [{"name": "OUTPUT0", **dims}],
    }


@contextmanager
def index_server(models: list[str]) -> Iterator[IndexServer]:
    with IndexServer(models) as server:
        yield server
