"""Helpers of the fault tests: a misbehaving ``/metrics`` front, a recorder of the
daemon's own ``/metrics`` over a fault, and what /proc says about a process."""

from __future__ import annotations

import contextlib
import threading
import urllib.request
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from support import DaemonProcess, http_get, sample_value

GARBAGE_BYTES = bytes(range(256)) * 64
"""Not UTF-8 at all: a page the parser refuses as a whole."""
GARBAGE_TEXT = b"<html><body><h1>502 Bad Gateway</h1></body></html>\n" * 40
"""Text that is no exposition: every line is a bad line."""


class MetricsFront:
    """``GET /metrics`` on 127.0.0.1 that passes ``upstream``'s page through, or on
    demand answers with garbage, with a page of ``huge_bytes`` (the real page padded
    with comments, sent without Content-Length so only reading tells its size), or
    stalls until it is closed."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.mode = "proxy"
        self.huge_bytes = 10 * 10**6
        self.served: dict[str, int] = {}
        self._released = threading.Event()
        self._lock = threading.Lock()
        front = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                mode = front.mode
                with front._lock:
                    front.served[mode] = front.served.get(mode, 0) + 1
                if mode == "stall":
                    front._released.wait(30)
                    return
                # the scraper may hang up: it gave up on the page, as it should
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    front._answer(self, mode)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/metrics"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def _answer(self, handler: BaseHTTPRequestHandler, mode: str) -> None:
        if mode == "garbage_bytes":
            body = GARBAGE_BYTES
        elif mode == "garbage_text":
            body = GARBAGE_TEXT
        else:
            with urllib.request.urlopen(self.upstream, timeout=5) as response:
                body = response.read()
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain; version=0.0.4")
        if mode != "huge":
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
            return
        handler.end_headers()  # HTTP/1.0 without a length: the body ends when we close
        handler.wfile.write(body)
        padding = b"# padding: a huge but otherwise valid exposition\n" * 1024
        written = len(body)
        while written < self.huge_bytes:
            handler.wfile.write(padding)
            written += len(padding)

    def count(self, mode: str) -> int:
        with self._lock:
            return self.served.get(mode, 0)

    def close(self) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()


class MetricsRecorder:
    """Reads the daemon's ``/metrics`` every ``every`` seconds on a thread; keeps every
    status and page, so a test can check that it answered throughout a fault."""

    def __init__(self, daemon: DaemonProcess, every: float = 0.1) -> None:
        self._url = f"{daemon.url}/metrics"
        self._every = every
        self.statuses: list[int | str] = []
        self.pages: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                status, body = http_get(self._url, timeout=5)
            except OSError as error:  # refused or timed out: recorded as a failure
                self.statuses.append(type(error).__name__)
            else:
                self.statuses.append(status)
                if status == 200:
                    self.pages.append(body)
            self._stop.wait(self._every)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def values(self, name: str, labels: Sequence[tuple[str, str]] = ()) -> list[float]:
        """Every value the series had on the recorded pages (where present)."""
        found = (sample_value(page, name, labels) for page in self.pages)
        return [value for value in found if value is not None]


def all_sample_values(text: str, prefix: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample whose name starts with ``prefix``: (name, labels, value)."""
    from prometheus_client.parser import text_string_to_metric_families

    return [
        (sample.name, dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith(prefix)
    ]


def metric(daemon: DaemonProcess, name: str, **labels: str) -> float | None:
    """One series of the daemon's ``/metrics`` right now."""
    return sample_value(daemon.metrics(), name, list(labels.items()))


def metric_at_least(daemon: DaemonProcess, name: str, minimum: float, **labels: str) -> bool:
    value = metric(daemon, name, **labels)
    return value is not None and value >= minimum


def counter_total(text: str, name: str, **labels: str) -> float:
    """The sum of a counter over every series that has ``labels`` (0 when none)."""
    from prometheus_client.parser import text_string_to_metric_families

    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


# -- /proc ---------------------------------------------------------------------------


def thread_count(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError(f"no Threads line for pid {pid}")


def open_fds(pid: int) -> int:
    return sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir())


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = str(fd.readlink())
        except OSError:
            continue  # closed meanwhile
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    return inodes


def _tcp_rows() -> list[list[str]]:
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        rows += [line.split() for line in lines]
    return rows


_ESTABLISHED = "01"


def connections_to(pid: int, port: int) -> int:
    """TCP connections of process ``pid`` to remote ``port`` that are established."""
    inodes = _socket_inodes(pid)
    return sum(
        1
        for row in _tcp_rows()
        if row[3] == _ESTABLISHED and int(row[2].rsplit(":", 1)[1], 16) == port and row[9] in inodes
    )


def established_on(port: int) -> int:
    """Established TCP connections whose local end is ``port`` (a server's clients)."""
    return sum(
        1
        for row in _tcp_rows()
        if row[3] == _ESTABLISHED and int(row[1].rsplit(":", 1)[1], 16) == port
    )


def port_of(url: str) -> int:
    from urllib.parse import urlsplit

    port = urlsplit(url if "://" in url else f"http://{url}").port
    assert port is not None
    return port
