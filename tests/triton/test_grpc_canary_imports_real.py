"""A daemon whose canaries speak gRPC imports no ``grpc``, protobuf, ``tritonclient`` or numpy.

Issue 15's footprint: ``grpc`` and ``tritonclient.grpc`` (protobuf, numpy with them) are
about 28 MiB of a daemon that, on a plaintext target with an HTTP API, needs none: its gRPC requests (plain and streaming) go out on the
engine's own h2c client, their messages are written and read by
:mod:`~tritonwatch.wire.kserve_protobuf`, and the canary's preparation (metadata,
config) asks the target's HTTP API. The daemon runs in a fresh interpreter against real
Triton until both canaries succeeded, then says what it imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from real_triton import RealTriton

pytestmark = pytest.mark.real

HEAVY = ("grpc", "google", "tritonclient", "numpy", "ml_dtypes")
"""Top-level packages (``google`` is protobuf's) the gRPC canary's daemon never loads."""

_DAEMON = """
import json, sys, time, urllib.request
from pathlib import Path
from tritonwatch.config import load_config
from tritonwatch.runtime.daemon import Daemon

path = Path(sys.argv[1])
daemon = Daemon(path, load_config(path), listen_override="127.0.0.1:0")
daemon.start()
ok = {}
try:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (ok and all(n >= 3 for n in ok.values())):
        time.sleep(0.5)
        text = urllib.request.urlopen(daemon.exporter_url + "/metrics", timeout=5).read()
        for line in text.decode().splitlines():
            if line.startswith("tritonwatch_canary_requests_total{") and 'outcome="success"' in line:
                model = line.split('model="')[1].split('"')[0]
                ok[model] = float(line.rsplit(" ", 1)[1])
finally:
    daemon.stop()
heavy = sorted(m for m in sys.modules if m.split(".")[0] in sys.argv[2].split(","))
print(json.dumps({"ok": ok, "heavy": heavy}))
"""


@pytest.mark.parametrize("named_by", ["http", "grpc"])
def test_a_daemon_with_grpc_canaries_never_imports_grpc(
    real_triton: RealTriton, tmp_path: Path, named_by: str
) -> None:
    """Breaks if anything on the gRPC canary's way (encoding, decoding, the streaming
    transport, the preparation over the target's HTTP API, the readiness check of a
    target named by its gRPC URL) imports ``grpc``, protobuf, ``tritonclient`` or numpy
    again, or if the lean path stops answering successfully."""
    triton = real_triton
    endpoints = (
        f"url: {triton.http_url}\n    grpc_url: {triton.grpc_url}"
        if named_by == "http"
        else f"url: {triton.grpc_url}\n    http_url: {triton.http_url}"
    )
    config = tmp_path / "c.yaml"
    config.write_text(
        f"""targets:
  - name: t
    {endpoints}
    metrics_url: {triton.metrics_url}
    models: [{{name: llm_stream, canary: {{protocol: grpc}}}},
             {{name: batching, canary: {{protocol: grpc}}}}]
canary: {{rate: 5/s, stream: {{max_tokens: 4, timeout: 10s}}}}
scrape: {{interval: 2s, timeout: 1s}}
nvml: {{enabled: false}}
"""
    )
    done = subprocess.run(
        [sys.executable, "-c", _DAEMON, str(config), ",".join(HEAVY)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(found["ok"]) == {"llm_stream", "batching"}, (found, done.stderr[-3000:])
    assert min(found["ok"].values()) >= 3, found
    assert found["heavy"] == [], found
