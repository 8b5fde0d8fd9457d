"""Load generation: our sweep's hot path against wrk, on the same endpoint, same run.

The endpoint is nginx answering a canned KServe v2 infer response on 127.0.0.1, so
the server costs next to nothing and the load generator is what is measured. For
each concurrency (1, 16, 64): wrk's requests/s, ours with one and with two worker
processes (HTTP, pre-encoded), our client CPU per request, and the ratio to wrk.
Needs Debian's ``wrk`` and ``nginx`` (``make bench`` installs them).

    python benchmarks/load_generation.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tritonwatch.probe.load.pool import cut_all, start_workers, stop_workers
from tritonwatch.probe.load.spec import http_load_spec
from tritonwatch.probe.payload import TensorSpec, build_inputs

CANNED = (
    '{"model_name":"simple","model_version":"1","outputs":[{"name":"OUTPUT0",'
    '"datatype":"INT32","shape":[1,16],"data":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}]}'
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_nginx(folder: Path, port: int) -> subprocess.Popen[bytes]:
    config = folder / "nginx.conf"
    config.write_text(
        f"""daemon off; worker_processes auto; pid {folder}/nginx.pid; error_log {folder}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off; keepalive_requests 1000000; client_body_temp_path {folder};
  proxy_temp_path {folder}; fastcgi_temp_path {folder};
  uwsgi_temp_path {folder}; scgi_temp_path {folder};
  server {{
    listen 127.0.0.1:{port};
    location / {{ default_type application/json; return 200 '{CANNED}'; }}
  }}
}}
"""
    )
    process = subprocess.Popen(["nginx", "-c", str(config), "-p", str(folder)])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("nginx did not start")


def run_wrk(url: str, body: Path, concurrency: int, seconds: float, folder: Path) -> float:
    script = folder / "post.lua"
    script.write_text(
        f'wrk.method = "POST"\nlocal f = io.open("{body}", "rb")\nwrk.body = f:read("*all")\n'
        'wrk.headers["Content-Type"] = "application/octet-stream"\n'
    )
    threads = min(2, concurrency)
    output = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{concurrency}", f"-d{seconds:g}s", "-s", str(script), url],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    match = re.search(r"Requests/sec:\s+([\d.]+)", output)
    assert match, output
    return float(match.group(1))


def run_ours(url: str, concurrency: int, processes: int, seconds: float) -> tuple[float, float]:
    """(requests/s, client CPU seconds per request)."""
    tensors = build_inputs(
        "simple",
        [TensorSpec("INPUT0", "INT32", (1, 16)), TensorSpec("INPUT1", "INT32", (1, 16))],
        {},
    )
    spec = http_load_spec(url, "simple", "", tensors, mode="concurrency", concurrency=concurrency)
    workers = start_workers(spec, processes)
    try:
        time.sleep(0.5)
        cut_all(workers)
        time.sleep(seconds)
        window = cut_all(workers)
    finally:
        stop_workers(workers)
    requests = len(window.latencies)
    return requests / window.wall_seconds, window.cpu_seconds / max(requests, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    for tool in ("wrk", "nginx"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is missing: apt-get install wrk nginx-light (or make bench)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        port = _free_port()
        nginx = start_nginx(folder, port)
        url = f"http://127.0.0.1:{port}"
        tensors = build_inputs(
            "simple",
            [TensorSpec("INPUT0", "INT32", (1, 16)), TensorSpec("INPUT1", "INT32", (1, 16))],
            {},
        )
        payload = http_load_spec(
            url, "simple", "", tensors, mode="concurrency", concurrency=1
        ).payload
        body = folder / "body.bin"
        body.write_bytes(payload.split(b"\r\n\r\n", 1)[1])
        try:
            print(
                "concurrency | wrk req/s | ours 1 proc req/s | ours 2 procs req/s | best/wrk"
                " | client µs/req (1 proc)"
            )
            for concurrency in (1, 16, 64):
                wrk = run_wrk(
                    f"{url}/v2/models/simple/infer", body, concurrency, args.seconds, folder
                )
                one, cpu = run_ours(url, concurrency, 1, args.seconds)
                two, _ = (
                    run_ours(url, concurrency, 2, args.seconds) if concurrency > 1 else (one, cpu)
                )
                best = max(one, two)
                print(
                    f"{concurrency:>11} | {wrk:>9.0f} | {one:>17.0f} | {two:>18.0f} | "
                    f"{best / wrk:>8.2f} | {cpu * 1e6:>6.1f}"
                )
        finally:
            nginx.terminate()
            nginx.wait(timeout=10)


if __name__ == "__main__":
    main()
