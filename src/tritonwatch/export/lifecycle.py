"""The management endpoints every Prometheus exporter answers: ``/-/healthy``,
``/-/ready`` and ``/-/reload``.

They answer as Prometheus and Alertmanager do, because Kubernetes probes, operators and
load balancers are written against those: plain-text bodies, ``/-/healthy`` 200 while
the process serves, ``/-/ready`` 200 once there is something true to export (503 and
what it waits for, before), and ``/-/reload`` by ``POST`` or ``PUT`` only, refused with
403 unless ``--web.enable-lifecycle`` turned it on (a reload is the SIGHUP's, done by
the main thread; 200 when the new config is in force, 500 when the old one stays).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from wsgiref.types import StartResponse, WSGIEnvironment

HEALTHY_PATH = "/-/healthy"
READY_PATH = "/-/ready"
RELOAD_PATH = "/-/reload"
PATHS = (HEALTHY_PATH, READY_PATH, RELOAD_PATH)
LIFECYCLE_OFF = "Lifecycle API is not enabled.\n"
"""Prometheus's own words when ``--web.enable-lifecycle`` is off."""
_READ_METHODS = ("GET", "HEAD")
_RELOAD_METHODS = ("POST", "PUT")


@dataclass(frozen=True, slots=True)
class Readiness:
    """Ready, or what the daemon still waits for (``waiting``, in words)."""

    waiting: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ready(self) -> bool:
        return not self.waiting


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """What the endpoints ask the daemon: its readiness, and a reload (None: lifecycle off)."""

    readiness: Callable[[], Readiness] = Readiness
    reload: Callable[[], bool] | None = None


def answer(
    lifecycle: Lifecycle, path: str, environ: WSGIEnvironment, start_response: StartResponse
) -> Iterable[bytes]:
    """The answer to a request for one of :data:`PATHS`."""
    method = environ.get("REQUEST_METHOD", "GET")
    if path == RELOAD_PATH:
        status, body, allowed = _reload(lifecycle, method)
    else:
        status, body, allowed = _read(lifecycle, path, method)
    payload = body.encode()
    headers = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(payload)))]
    if status.startswith("405"):
        headers.append(("Allow", ", ".join(allowed)))
    start_response(status, headers)
    return [b""] if method == "HEAD" else [payload]


def _reload(lifecycle: Lifecycle, method: str) -> tuple[str, str, tuple[str, ...]]:
    if method not in _RELOAD_METHODS:
        return "405 Method Not Allowed", "Only POST or PUT requests allowed.\n", _RELOAD_METHODS
    if lifecycle.reload is None:
        return "403 Forbidden", LIFECYCLE_OFF, _RELOAD_METHODS
    if lifecycle.reload():
        return "200 OK", "", _RELOAD_METHODS
    failed = "failed to reload config: the old config stays; the log says why\n"
    return "500 Internal Server Error", failed, _RELOAD_METHODS


def _read(lifecycle: Lifecycle, path: str, method: str) -> tuple[str, str, tuple[str, ...]]:
    if method not in _READ_METHODS:
        return "405 Method Not Allowed", "Only GET or HEAD requests allowed.\n", _READ_METHODS
    if path == HEALTHY_PATH:
        return "200 OK", "tritonwatch is Healthy.\n", _READ_METHODS
    readiness = lifecycle.readiness()
    if readiness.ready:
        return "200 OK", "tritonwatch is Ready.\n", _READ_METHODS
    waiting = "".join(f"waiting for {reason}\n" for reason in readiness.waiting)
    return "503 Service Unavailable", "tritonwatch is not ready.\n" + waiting, _READ_METHODS
