"""The exporter's HTTP server: ``/metrics``, ``/health``, ``/-/*`` and the status page.

A small threaded WSGI server from the standard library: prometheus_client's own
``start_http_server`` serves only metrics, while the status page and basic auth hang
off the same routing here.

TLS, when on, is negotiated per connection in that connection's own thread, so a
client that connects and never completes its handshake cannot stall the others, and
the certificates in force are whatever the web-config names at that moment.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from prometheus_client import CollectorRegistry

from tritonwatch.common.listen import ListenAddress
from tritonwatch.common.logs import get_logger
from tritonwatch.export import lifecycle as lifecycle_endpoints
from tritonwatch.export.basic_auth import BasicAuthChecker, parse_basic_authorization
from tritonwatch.export.exposition import make_metrics_app
from tritonwatch.export.lifecycle import Lifecycle
from tritonwatch.export.web_config_watcher import WebConfigWatcher

_log = get_logger("exporter")

TLS_HANDSHAKE_TIMEOUT_SECONDS = 10.0
AUTH_REALM = "tritonwatch"


@dataclass(frozen=True, slots=True)
class HealthReport:
    """``healthy`` decides 200 or 503; ``details`` is the JSON body that says why."""

    healthy: bool
    details: dict[str, Any] = field(default_factory=dict)


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a stuck scraper must never hold up shutdown
    allow_reuse_address = True
    tls_context: Callable[[], ssl.SSLContext | None] | None = None
    """The context for the next connection; None (or returning None) serves plain HTTP."""

    def finish_request(self, request: Any, client_address: Any) -> None:
        context = self.tls_context() if self.tls_context is not None else None
        if context is None or not isinstance(request, socket.socket):
            super().finish_request(request, client_address)
            return
        connection = _handshake(context, request, client_address)
        if connection is None:
            return
        try:
            super().finish_request(connection, client_address)
        finally:
            self.shutdown_request(connection)


def _handshake(
    context: ssl.SSLContext, request: socket.socket, client_address: Any
) -> ssl.SSLSocket | None:
    """The TLS connection, or None (logged at debug) for a client that fails the
    handshake: wrong version, untrusted or missing client certificate, plain HTTP."""
    request.settimeout(TLS_HANDSHAKE_TIMEOUT_SECONDS)
    try:
        connection = context.wrap_socket(request, server_side=True)
    except (ssl.SSLError, OSError) as error:
        _log.debug("tls_handshake_failed", client=str(client_address[0]), error=str(error))
        return None
    connection.settimeout(None)
    return connection


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
    status_page: Callable[[int], str] | None = None,
    lifecycle: Lifecycle | None = None,
) -> WSGIApplication:
    """Routes requests to the metrics, health, lifecycle and status-page handlers.

    ``/metrics`` answers as ``prometheus_client.make_wsgi_app`` would, byte for byte,
    at a fraction of its CPU (see :mod:`tritonwatch.export.exposition`).
    """
    metrics_app = make_metrics_app(registry)
    management = lifecycle or Lifecycle()

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            body: Iterable[bytes] = metrics_app(environ, start_response)
            return body
        if path in lifecycle_endpoints.PATHS:
            return lifecycle_endpoints.answer(management, path, environ, start_response)
        if path == "/health":
            report = health()
            status = "200 OK" if report.healthy else "503 Service Unavailable"
            return _json_response(start_response, status, report.details)
        if path == "/":
            number = _page_number(environ.get("QUERY_STRING", ""))
            page = status_page(number).encode() if status_page is not None else _INDEX
            start_response(
                "200 OK",
                [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(page)))],
            )
            return [page]
        return _json_response(start_response, "404 Not Found", {"error": f"no page at {path}"})

    return app


def _page_number(query: str) -> int:
    """``page=N`` of the status page's query string; 1 when absent or not a number."""
    values = parse_qs(query).get("page", [])
    return int(values[0]) if values and values[0].isdigit() else 1


def with_basic_auth(
    app: WSGIApplication, checker: Callable[[], BasicAuthChecker | None]
) -> WSGIApplication:
    """Puts basic auth in front of every route of ``app`` while ``checker()`` gives one.

    Missing, garbled and wrong credentials all get the same 401, so a client learns
    nothing about which users exist. The Authorization header is taken out of the
    environment before ``app`` runs, so nothing downstream can log it.
    """

    def guarded(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        current = checker()
        if current is None:
            return app(environ, start_response)
        credentials = parse_basic_authorization(environ.get("HTTP_AUTHORIZATION"))
        if credentials is None or not current.check(*credentials):
            return _unauthorized(start_response)
        inner = {key: value for key, value in environ.items() if key != "HTTP_AUTHORIZATION"}
        return app(inner, start_response)

    return guarded


def _unauthorized(start_response: StartResponse) -> Iterable[bytes]:
    payload = json.dumps({"error": "unauthorized"}).encode()
    start_response(
        "401 Unauthorized",
        [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(payload))),
            ("WWW-Authenticate", f'Basic realm="{AUTH_REALM}"'),
        ],
    )
    return [payload]


class ExporterServer:
    """Owns the listening socket and the thread that serves it.

    TLS comes from ``tls_cert_file``/``tls_key_file`` or from the web-config's
    ``tls_server_config``, never both; the web-config's ``basic_auth_users`` guard
    every route.

    Raises:
        WebConfigError: ``web_config_file`` is invalid.
        ValueError: both TLS sources are given.
    """

    def __init__(
        self,
        address: ListenAddress,
        app: WSGIApplication,
        tls_cert_file: Path | None = None,
        tls_key_file: Path | None = None,
        *,
        web_config_file: Path | None = None,
    ) -> None:
        self._web = WebConfigWatcher(web_config_file) if web_config_file is not None else None
        web_tls = self._web is not None and self._web.current().tls_context is not None
        self._static_tls = _static_tls_context(tls_cert_file, tls_key_file)
        if web_tls and self._static_tls is not None:
            raise ValueError(
                "exporter TLS is set twice: tls_cert_file/tls_key_file and the web-config's "
                "tls_server_config; keep one"
            )
        self._server = make_server(
            address.host,
            address.port,
            with_basic_auth(app, self._checker) if self._web is not None else app,
            server_class=_ThreadingWSGIServer,
            handler_class=_QuietHandler,
        )
        if web_tls or self._static_tls is not None:
            self._server.tls_context = self._tls_context
        self.scheme = "https" if web_tls or self._static_tls is not None else "http"
        if self.scheme == "http" and self._checker() is not None:
            _log.warning("basic_auth_without_tls", hint="passwords cross the network in clear")
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="exporter-http", daemon=True
        )

    def _checker(self) -> BasicAuthChecker | None:
        return self._web.current().checker if self._web is not None else None

    def _tls_context(self) -> ssl.SSLContext | None:
        if self._web is not None:
            return self._web.current().tls_context or self._static_tls
        return self._static_tls

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


def _static_tls_context(cert_file: Path | None, key_file: Path | None) -> ssl.SSLContext | None:
    """The context for ``exporter.tls_cert_file``/``tls_key_file``: TLS 1.2 and up."""
    if cert_file is None or key_file is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context
