"""A real Seldon MLServer (1.7.1) for tests, on free loopback ports.

MLServer is the KServe v2 server that is *not* Triton: ``GET /v2`` lists no extensions
(so no binary tensor data), there is no model config API, and it answers only JSON
tensors. The canary must work against it as well as against Triton. ``make test``
installs it into its own venv under ``.mlserver`` (scripts/ensure-mlserver.sh);
``TRITONWATCH_MLSERVER_HOME`` points elsewhere. A server that cannot start fails the
test with its log, never skips it.

The model repository is ``tests/mlserver_models``: its ``settings.json`` binds every
listener (HTTP, gRPC, metrics) to 127.0.0.1 and turns off what the tests do not need
(parallel inference workers, Kafka, caching); this class picks the three ports through
MLServer's ``MLSERVER_*_PORT`` variables. The ``echo`` model (a custom ``MLModel``)
returns its FP32 input ``INPUT0`` ([-1, 16]) as ``OUTPUT0``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from support import REPO, free_port

MODELS = REPO / "tests" / "mlserver_models"
ECHO_MODEL = "echo"
START_TIMEOUT_SECONDS = 60.0


def mlserver_home() -> Path:
    """Where scripts/ensure-mlserver.sh installed MLServer's venv."""
    return Path(os.environ.get("TRITONWATCH_MLSERVER_HOME", REPO / ".mlserver"))


def mlserver_binary() -> Path:
    return mlserver_home() / "venv" / "bin" / "mlserver"


class RealMLServer:
    """One ``mlserver start`` process; ``start()`` returns once the echo model is ready."""

    def __init__(self, workdir: Path, *, repository: Path = MODELS) -> None:
        self.workdir = workdir
        """Its working directory: MLServer reads ``.env`` and writes ``.metrics`` there."""
        self.repository = repository
        self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        self.log_path = workdir / "mlserver.log"
        self.process: subprocess.Popen[bytes] | None = None

    # -- addresses ------------------------------------------------------------------------
    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"grpc://127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def ports(self) -> tuple[int, int, int]:
        return (self.http_port, self.grpc_port, self.metrics_port)

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> RealMLServer:
        binary = mlserver_binary()
        assert binary.exists(), f"{binary} missing: run scripts/ensure-mlserver.sh (make test does)"
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Only our settings: a developer's own MLSERVER_* variables must not move a port
        # or a bind address (settings.json wins over the environment for what it sets).
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLSERVER")}
        env.update(
            MLSERVER_HOST="127.0.0.1",
            MLSERVER_HTTP_PORT=str(self.http_port),
            MLSERVER_GRPC_PORT=str(self.grpc_port),
            MLSERVER_METRICS_PORT=str(self.metrics_port),
            MLSERVER_METRICS_DIR=str(self.workdir / "metrics"),
            MLSERVER_ENVIRONMENTS_DIR=str(self.workdir / "envs"),
        )
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [str(binary), "start", str(self.repository)],
            cwd=self.workdir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not self._ready():
            if self.process.poll() is not None:
                raise AssertionError(
                    f"mlserver exited ({self.process.returncode}):\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(
                    f"mlserver not ready in {START_TIMEOUT_SECONDS}s:\n{self.log_tail()}"
                )
            time.sleep(0.2)
        return self

    def _ready(self) -> bool:
        """The model answers on HTTP, and gRPC and metrics (started last) accept."""
        try:
            if self.request("GET", f"/v2/models/{ECHO_MODEL}/ready")[0] != 200:
                return False
            with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
                if response.status != 200:
                    return False
            return _grpc_model_ready(f"127.0.0.1:{self.grpc_port}", ECHO_MODEL)
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):  # children left by a server gone first
            os.killpg(self.process.pid, signal.SIGKILL)

    def log_tail(self, lines: int = 60) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    # -- the HTTP API -----------------------------------------------------------------------
    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        """One HTTP call to the server; returns (status, body) for any status."""
        data = (
            None
            if body is None
            else (body if isinstance(body, bytes) else json.dumps(body).encode())
        )
        request = urllib.request.Request(
            self.http_url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", **(headers or {})},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def json(self, path: str) -> dict[str, Any]:
        status, body = self.request("GET", path)
        assert status == 200, (status, body)
        result: dict[str, Any] = json.loads(body)
        return result


def _grpc_model_ready(address: str, model: str) -> bool:
    client = grpcclient.InferenceServerClient(address)
    try:
        return bool(client.is_model_ready(model, client_timeout=5))
    except InferenceServerException:
        return False
    finally:
        client.close()
