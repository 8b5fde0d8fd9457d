"""What the real servers of the tests share: one process group, a log, a readiness wait,
a bounded stop and a plain HTTP call (``real_triton.py``, ``real_mlserver.py``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any


class ServerProcess:
    """A server binary run in its own process group, so that its children (Triton's
    Python-backend stubs, MLServer's workers) stop with it."""

    name = "server"
    """How failures name the program."""
    start_timeout_seconds = 90.0
    stop_timeout_seconds = 10.0
    json_content_type = False
    """Send ``Content-Type: application/json`` with every request (MLServer asks for it)."""

    def __init__(self, http_port: int, log_path: Path) -> None:
        self.http_port = http_port
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def launch(
        self,
        command: Sequence[str],
        ready: Callable[[], bool],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        """Starts ``command`` and returns once ``ready()``; fails with the log tail if the
        process exits first or is not ready in :attr:`start_timeout_seconds`."""
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                list(command),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=None if env is None else dict(env),
                cwd=cwd,
            )
        deadline = time.monotonic() + self.start_timeout_seconds
        while not ready():
            if self.process.poll() is not None:
                raise AssertionError(
                    f"{self.name} exited ({self.process.returncode}):\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(
                    f"{self.name} not ready in {self.start_timeout_seconds}s:\n{self.log_tail()}"
                )
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM to the whole group, SIGKILL after :attr:`stop_timeout_seconds`, and
        SIGKILL again for children left by a server that went first."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=self.stop_timeout_seconds)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def log_tail(self, lines: int = 60) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        """One HTTP call to the server; returns (status, body) for any status."""
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent = {"Content-Type": "application/json"} if self.json_content_type else {}
        request = urllib.request.Request(
            self.http_url + path, data=data, method=method, headers={**sent, **(headers or {})}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()
