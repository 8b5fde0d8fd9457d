"""A real ``tritonserver`` (2.51, CPU, Python backend) for tests, on free loopback ports.

``make test`` installs it into ``.triton`` (scripts/ensure-triton.sh); ``TRITONWATCH_TRITON_HOME``
points elsewhere. A server that cannot start fails the test with its log: real Triton is
the ground truth here, so it is never skipped.

The models in ``tests/triton_models`` (see ``identity.py`` there) have known service times.
The server runs in explicit model-control mode, so tests can load, reload with a config
override, and unload models through the repository API as ``tritonwatch tune`` does.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from server_process import ServerProcess
from support import REPO, free_port

MODELS = REPO / "tests" / "triton_models"
ALL_MODELS = tuple(
    sorted(path.name for path in MODELS.iterdir() if (path / "config.pbtxt").is_file())
)
HISTOGRAM_LATENCIES = "--metrics-config=histogram_latencies=true"
"""On for every test server: 2.51 takes it and exports no histogram family for it yet
(tests/triton/test_generate_stream_real.py pins that), so /metrics reads as without it."""
CACHE_SIZE_BYTES = 1 << 20
"""The response cache every test server gets (``--cache-config local,size=...``): the
``cached`` test model's entries are a few hundred bytes each."""
STARTS_LOG = "TRITONWATCH_TRITON_STARTS_LOG"
"""The environment variable naming a file that gets one line per tritonserver started."""


def triton_home() -> Path:
    """Where scripts/ensure-triton.sh installed tritonserver and perf_analyzer."""
    return Path(os.environ.get("TRITONWATCH_TRITON_HOME", REPO / ".triton"))


def cache_directory() -> Path:
    """Where the install keeps its cache libraries (``local/libtritoncache_local.so``)."""
    return triton_home() / "server" / "pytriton" / "tritonserver" / "caches"


def tritonserver_binary() -> Path:
    return triton_home() / "bin" / "tritonserver"


def perf_analyzer_binary() -> Path:
    return triton_home() / "bin" / "perf_analyzer"


class RealTriton(ServerProcess):
    """One ``tritonserver`` process; ``start()`` returns once every model is READY."""

    name = "tritonserver"

    def __init__(
        self,
        models: Sequence[str] = ALL_MODELS,
        *,
        repository: Path = MODELS,
        extra_args: Sequence[str] = (),
        log_path: Path | None = None,
    ) -> None:
        http_port = free_port()
        super().__init__(http_port, log_path or Path(f"/tmp/tritonwatch-triton-{http_port}.log"))
        self.models = tuple(models)
        self.repository = repository
        self.extra_args = tuple(extra_args)
        self.grpc_port, self.metrics_port = free_port(), free_port()

    # -- addresses ------------------------------------------------------------------------
    @property
    def grpc_url(self) -> str:
        return f"grpc://127.0.0.1:{self.grpc_port}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> RealTriton:
        binary = tritonserver_binary()
        assert binary.exists(), f"{binary} missing: run scripts/ensure-triton.sh (make test does)"
        command = [
            str(binary),
            f"--model-repository={self.repository}",
            "--model-control-mode=explicit",
            *(f"--load-model={model}" for model in self.models),
            # Triton binds every interface by default; tests stay on loopback.
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            "--metrics-address=127.0.0.1",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            "--exit-timeout-secs=2",
            "--log-verbose=0",
            HISTOGRAM_LATENCIES,
            # The response cache, for models with response_cache {enable: true} (``cached``).
            f"--cache-directory={cache_directory()}",
            f"--cache-config=local,size={CACHE_SIZE_BYTES}",
            *self.extra_args,
        ]
        try:
            self.launch(command, self._all_ready)
        finally:
            self._count_start()
        return self

    def _count_start(self) -> None:
        """One line (pid, models) in the ``TRITONWATCH_TRITON_STARTS_LOG`` file, when set,
        for each server started, ready or not: the run's count of tritonserver starts."""
        path = os.environ.get(STARTS_LOG)
        if not path or self.process is None:
            return
        line = f"{self.process.pid} {self.log_path.name} {','.join(self.models)}\n".encode()
        # One append of one short line: atomic beside the other xdist workers' lines.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def _all_ready(self) -> bool:
        try:
            status, _ = self.request("GET", "/v2/health/ready")
            if status != 200:
                return False
            return all(self.request("GET", f"/v2/models/{m}/ready")[0] == 200 for m in self.models)
        except OSError:
            return False

    # -- the HTTP API -----------------------------------------------------------------------
    def config(self, model: str) -> dict[str, Any]:
        status, body = self.request("GET", f"/v2/models/{model}/config")
        assert status == 200, body
        result: dict[str, Any] = json.loads(body)
        return result

    def load(self, model: str, config: dict[str, Any] | None = None) -> None:
        """Loads ``model``, with ``config`` (a whole model config) overriding its file."""
        body: dict[str, Any] = {}
        if config is not None:
            body = {"parameters": {"config": json.dumps(config)}}
        status, answer = self.request("POST", f"/v2/repository/models/{model}/load", body)
        assert status == 200, answer

    def reset(self, model: str) -> None:
        """Loads ``model`` again from its files, undoing config overrides and their state.

        Triton 2.51 keeps a loaded override through a plain load; only an unload first
        makes it read the files again."""
        self.unload(model)
        deadline = time.monotonic() + 30
        while self.request("GET", f"/v2/models/{model}/ready")[0] == 200 or any(
            entry["name"] == model and entry.get("state") == "UNLOADING"
            for entry in json.loads(self.request("POST", "/v2/repository/index", {})[1])
        ):
            assert time.monotonic() < deadline, f"{model} did not unload"
            time.sleep(0.05)
        self.load(model)

    def unload(self, model: str) -> None:
        status, answer = self.request("POST", f"/v2/repository/models/{model}/unload", {})
        assert status == 200, answer

    def stats(self, model: str) -> dict[str, Any]:
        status, body = self.request("GET", f"/v2/models/{model}/stats")
        assert status == 200, body
        result: dict[str, Any] = json.loads(body)["model_stats"][0]
        return result
