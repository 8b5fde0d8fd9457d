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

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from server_process import ServerProcess
from support import REPO, free_port

MODELS = REPO / "tests" / "mlserver_models"
ECHO_MODEL = "echo"


def mlserver_home() -> Path:
    """Where scripts/ensure-mlserver.sh installed MLServer's venv."""
    return Path(os.environ.get("TRITONWATCH_MLSERVER_HOME", REPO / ".mlserver"))


def mlserver_binary() -> Path:
    return mlserver_home() / "venv" / "bin" / "mlserver"


class RealMLServer(ServerProcess):
    """One ``mlserver start`` process; ``start()`` returns once the echo model is ready."""

    name = "mlserver"
    start_timeout_seconds = 60.0
    stop_timeout_seconds = 15.0
    json_content_type = True

    def __init__(self, workdir: Path, *, repository: Path = MODELS) -> None:
        super().__init__(free_port(), workdir / "mlserver.log")
        self.workdir = workdir
        """Its working directory: MLServer reads ``.env`` and writes ``.metrics`` there."""
        self.repository = repository
        self.grpc_port, self.metrics_port = free_port(), free_port()

    # -- addresses ------------------------------------------------------------------------
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
        self.launch(
            [str(binary), "start", str(self.repository)], self._ready, env=env, cwd=self.workdir
        )
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

    # -- the HTTP API -----------------------------------------------------------------------
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
