"""The exporter's HTTP server: ``/metrics``, ``/health`` and an index page.

A small threaded WSGI server from the standard library: prometheus_client's own
``start_http_server`` serves only metrics, and later pages (status page, basic
auth) hang off the same routing here.
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from prometheus_client import CollectorRegistry, make_wsgi_app

from tritonwatch.listen import ListenAddress
from tritonwatch.logs import get_logger

_log = get_logger("exporter")


@dataclass(frozen=True, slots=True)
class HealthReport:
    """``healthy`` decides 200 or 503; ``details`` is the JSON body that says why."""

    healthy: bool
    details: dict[str, Any] = field(default_factory=dict)


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a stuck scraper must never hold up shutdown
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    """Sends access lines to the structured log at debug level instead of stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("http_request", line=format % args)


def _json_response(
    start_response: StartResponse, status: str, body: dict[str, Any]
) -> Iterable[bytes]:
    payload = json.dumps(body, sort_keys=True).encode()
    start_response(
        status, [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))]
    )
    return [payload]


_INDEX = b"""<!doctype html><html><head><title>tritonwatch</title></head><body>
<h1>tritonwatch</h1><p><a href="/metrics">Metrics</a> &middot; <a href="/health">Health</a></p>
</body></html>"""


def exporter_app(
    registry: CollectorRegistry,
    health: Callable[[], HealthReport],
    status_page: Callable[[], str] | None = None,
) -> WSGIApplication:
    """Routes requests to the metrics, health and status-page handlers."""
    metrics_app = make_wsgi_app(registry)

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            body: Iterable[bytes] = metrics_app(environ, start_response)
            return body
        if path == "/health":
            report = health()
            status = "200 OK" if report.healthy else "503 Service Unavailable"
            return _json_response(start_response, status, report.details)
        if path == "/":
            page = status_page().encode() if status_page is not None else _INDEX
            start_response(
                "200 OK",
                [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(page)))],
            )
            return [page]
        return _json_response(start_response, "404 Not Found", {"error": f"no page at {path}"})

    return app


class ExporterServer:
    """Owns the listening socket and the thread that serves it."""

    def __init__(
        self,
        address: ListenAddress,
        app: WSGIApplication,
        tls_cert_file: Path | None = None,
        tls_key_file: Path | None = None,
    ) -> None:
        self._server = make_server(
            address.host,
            address.port,
            app,
            server_class=_ThreadingWSGIServer,
            handler_class=_QuietHandler,
        )
        if tls_cert_file is not None and tls_key_file is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(tls_cert_file, tls_key_file)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.scheme = "https" if tls_cert_file else "http"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="exporter-http", daemon=True
        )

    @property
    def address(self) -> ListenAddress:
        """The address actually bound (the real port when 0 was asked for)."""
        host, port = self._server.server_address[:2]
        return ListenAddress(str(host), int(port))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=2.0)
