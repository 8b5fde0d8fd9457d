"""Test helpers shared across test folders: paths, free ports, a real daemon process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
TRITONWATCH = str(BIN / "tritonwatch")
QUIET_HOST_CPU = 0.25
"""The host CPU utilisation a simulator pins (``Simulator(host_cpu_utilization=...)``) in
tests whose advice must not follow the test host's load: the advisor blocks advice on a
saturated host (>= 0.9), which a CI run on two cores reaches."""


def fixtures_dir() -> Path:
    """The real-data fixtures in tests/fixtures (``TRITONWATCH_FIXTURES`` overrides the folder)."""
    return Path(os.environ.get("TRITONWATCH_FIXTURES", REPO / "tests" / "fixtures"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, every: float = 0.05) -> Any:
    """Returns the first truthy value of ``predicate`` or fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


SMOKE_FACTOR = 5.0
"""A real-time bound in a test is at least this many times what the test expects."""


def assert_within_smoke_bound(elapsed_s: float, expected_s: float, what: str) -> None:
    """A real-time smoke check: fails only past ``SMOKE_FACTOR`` x ``expected_s``.

    The one way a test outside ``bench`` may bound wall-clock time, so a busy neighbour
    cannot turn it red; exact timing belongs to a fake clock, figures to ``benchmarks/``.
    """
    bound = SMOKE_FACTOR * expected_s
    assert elapsed_s < bound, f"{what} took {elapsed_s:.3f}s, over {bound:.3f}s (5x {expected_s}s)"


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """GET ``url``; returns (status, body) for any status, 4xx/5xx included."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


class DaemonProcess:
    """``tritonwatch run`` as a real subprocess, its JSON log lines collected as they come."""

    def __init__(self, config: Path | None, *extra: str, env: dict[str, str] | None = None) -> None:
        """``config`` None runs without ``--config`` (``extra`` gives ``--url …``)."""
        source = ["--config", str(config)] if config is not None else []
        command = [TRITONWATCH, "run", *source, "--listen", "127.0.0.1:0"]
        command += ["--log-format", "json", *extra]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.lines: list[str] = []
        self.events: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            self.url = self.wait_for_event("exporter_listening")["url"]
        except AssertionError:
            self.stop()
            raise

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line)
                try:
                    self.events.append(json.loads(line))
                except json.JSONDecodeError:
                    self.events.append({"event": "(not JSON)", "line": line})
                self._changed.notify_all()

    def wait_for_event(
        self, event: str, timeout: float = 10.0, after: int = 0, **fields: Any
    ) -> dict[str, Any]:
        """The first log event named ``event`` (at index ≥ ``after``) with ``fields``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for record in self.events[after:]:
                    if record.get("event") == event and all(
                        record.get(k) == v for k, v in fields.items()
                    ):
                        return record
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.process.poll() is not None:
                    raise AssertionError(
                        f"no {event!r} log event; stderr: {self.stderr_so_far()}; "
                        f"log: {''.join(self.lines[-20:])}"
                    )
                self._changed.wait(remaining)

    def stderr_so_far(self) -> str:
        if self.process.poll() is None or self.process.stderr is None:
            return "(still running)"
        if self.process.stderr.closed:
            return "(closed)"
        return self.process.stderr.read()

    def metrics(self) -> str:
        status, body = http_get(f"{self.url}/metrics")
        assert status == 200
        return body

    def signal(self, number: signal.Signals) -> None:
        self.process.send_signal(number)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM (if still running), wait, and release the pipes; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise
        finally:
            self._reader.join(timeout=5)
            for pipe in (self.process.stdout, self.process.stderr):
                if pipe is not None:
                    pipe.close()
        return code


def exposition(*collectors: Any) -> str:
    """The text format of ``collectors`` on a registry of their own, as a scrape sees it."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry).decode()


def promtool_check_metrics(text: str) -> subprocess.CompletedProcess[str]:
    """The real ``promtool check metrics`` run over exposition ``text``."""
    return subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )


def assert_promtool_clean(text: str) -> None:
    """Fails with promtool's own words unless ``text`` passes ``promtool check metrics``."""
    checked = promtool_check_metrics(text)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def sample_value(text: str, name: str, labels: Sequence[tuple[str, str]] = ()) -> float | None:
    """The value of series ``name{labels}`` in exposition ``text``, or None if absent."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = dict(labels)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in wanted.items()):
                return float(sample.value)
    return None


class ReadyEndpoint:
    """A loopback HTTP server answering ``/v2/health/ready`` with a settable status.

    Stands in for a server's readiness endpoint in tests of the readiness probe
    itself; everything that needs Triton behaviour uses the simulator.
    """

    def __init__(self) -> None:
        self.status = 200
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                code = endpoint.status if self.path == "/v2/health/ready" else 404
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class RefusedHttp(requests.adapters.BaseAdapter):
    """Mounted on a ``requests`` session's URL prefix: every request there is refused
    (as on a port nothing listens on), and its URL remembered."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> Any:
        self.asked.append(str(request.url))
        raise requests.ConnectionError("Connection refused (nothing on the guessed port)")

    def close(self) -> None:
        pass
