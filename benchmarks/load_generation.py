"""Load generation: our sweep's hot path against wrk, on the same endpoint, same run.

The endpoint is nginx answering a canned KServe v2 infer response on 127.0.0.1, so
the server costs next to nothing and the load generator is what is measured. For
each concurrency (1, 16, 64): wrk's requests/s, ours with one and with two worker
processes (HTTP, pre-encoded), our client CPU per request, and the ratio to wrk.
gRPC is measured the same way against the same nginx answering a canned
``ModelInferResponse`` over HTTP/2 (wrk speaks only HTTP/1.1, so its HTTP figure is
the anchor there too). Needs Debian's ``wrk`` and ``nginx`` (``make bench`` installs
them).

    python benchmarks/load_generation.py [--seconds 5] [--repeats 1]
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tritonwatch.kserve.payload import Tensor, TensorSpec, build_inputs
from tritonwatch.sweep.pool import cut_all, start_workers, stop_workers
from tritonwatch.sweep.spec import LoadSpec, grpc_load_spec, http_load_spec

CANNED = (
    '{"model_name":"simple","model_version":"1","outputs":[{"name":"OUTPUT0",'
    '"datatype":"INT32","shape":[1,16],"data":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}]}'
)
CONCURRENCIES = (1, 16, 64)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _canned_grpc_body() -> bytes:
    """One gRPC message frame (flag, length, ``ModelInferResponse``) with OUTPUT0 [1, 16]."""
    from tritonclient.grpc import service_pb2  # noqa: PLC0415 - heavy; load on use

    response = service_pb2.ModelInferResponse(model_name="simple", model_version="1")
    output = response.outputs.add(name="OUTPUT0", datatype="INT32")
    output.shape.extend([1, 16])
    response.raw_output_contents.append(bytes(64))
    message = response.SerializeToString()
    return b"\x00" + struct.pack(">I", len(message)) + message


def start_nginx(folder: Path, port: int, grpc_port: int | None = None) -> subprocess.Popen[bytes]:
    """nginx on 127.0.0.1:``port`` (HTTP/1.1, canned JSON) and, given ``grpc_port``, on
    that port over cleartext HTTP/2 answering every call with a canned gRPC response
    (a static file, POST turned into GET by ``error_page``, ``grpc-status`` trailer)."""
    grpc_server = ""
    if grpc_port is not None:
        (folder / "infer.bin").write_bytes(_canned_grpc_body())
        grpc_server = f"""
  server {{
    listen 127.0.0.1:{grpc_port} http2;
    location / {{
      root {folder}; default_type application/grpc; add_trailer grpc-status 0 always;
      error_page 405 =200 /infer.bin; rewrite ^ /infer.bin break;
    }}
  }}"""
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
  }}{grpc_server}
}}
"""
    )
    process = subprocess.Popen(["nginx", "-c", str(config), "-p", str(folder)])
    deadline = time.monotonic() + 10
    ports = [port] if grpc_port is None else [port, grpc_port]
    while time.monotonic() < deadline:
        try:
            for each in ports:
                socket.create_connection(("127.0.0.1", each), timeout=0.2).close()
            return process
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("nginx did not start")


def run_wrk(url: str, body: Path, concurrency: int, seconds: float, folder: Path) -> float:
    """wrk's requests/s."""
    return run_wrk_measured(url, body, concurrency, seconds, folder)[0]


def run_wrk_measured(
    url: str, body: Path, concurrency: int, seconds: float, folder: Path
) -> tuple[float, float]:
    """(requests/s, wrk's CPU seconds per request): its CPU from the kernel's account of
    reaped children, so it is the same kind of figure as our own client CPU."""
    script = folder / "post.lua"
    script.write_text(
        f'wrk.method = "POST"\nlocal f = io.open("{body}", "rb")\nwrk.body = f:read("*all")\n'
        'wrk.headers["Content-Type"] = "application/octet-stream"\n'
    )
    threads = min(2, concurrency)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    output = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{concurrency}", f"-d{seconds:g}s", "-s", str(script), url],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    match = re.search(r"Requests/sec:\s+([\d.]+)", output)
    total = re.search(r"(\d+) requests in", output)
    assert match, output
    assert total, output
    return float(match.group(1)), cpu / max(int(total.group(1)), 1)


def _tensors() -> list[Tensor]:
    return build_inputs(
        "simple",
        [TensorSpec("INPUT0", "INT32", (1, 16)), TensorSpec("INPUT1", "INT32", (1, 16))],
        {},
    )


def run_spec(spec: LoadSpec, processes: int, seconds: float) -> tuple[float, float, int]:
    """(requests/s, client CPU seconds per request, failed requests) of one window."""
    workers = start_workers(spec, processes)
    try:
        time.sleep(0.5)
        cut_all(workers)
        time.sleep(seconds)
        window = cut_all(workers)
    finally:
        stop_workers(workers)
    requests = len(window.latencies)
    failed = window.errors + window.timeouts
    return requests / window.wall_seconds, window.cpu_seconds / max(requests, 1), failed


def run_ours(url: str, concurrency: int, processes: int, seconds: float) -> tuple[float, float]:
    """(requests/s, client CPU seconds per request) over HTTP."""
    tensors = _tensors()
    spec = http_load_spec(url, "simple", "", tensors, mode="concurrency", concurrency=concurrency)
    rate, cpu, _ = run_spec(spec, processes, seconds)
    return rate, cpu


@dataclass(frozen=True)
class LoadResult:
    """One concurrency of one repeat. ``*_best`` is the better of one and two processes
    (the sweep adds processes when one is busy); CPU per request is from one process."""

    concurrency: int
    wrk: float
    wrk_cpu_per_request: float
    http_one: float
    http_two: float
    http_cpu_per_request: float
    grpc_one: float
    grpc_two: float
    grpc_cpu_per_request: float
    failed: int

    @property
    def http_best(self) -> float:
        return max(self.http_one, self.http_two)

    @property
    def grpc_best(self) -> float:
        return max(self.grpc_one, self.grpc_two)


def _check_tools() -> None:
    for tool in ("wrk", "nginx"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is missing: apt-get install wrk nginx-light (or make bench)")


def measure(
    concurrencies: Sequence[int] = CONCURRENCIES,
    seconds: float = 5.0,
    repeats: int = 1,
    *,
    grpc: bool = True,
) -> list[LoadResult]:
    """Every concurrency, ``repeats`` times round-robin (so a slow spell of the machine
    hits all of them alike), wrk and ours back to back on one nginx."""
    _check_tools()
    results: list[LoadResult] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        port, grpc_port = _free_port(), _free_port()
        nginx = start_nginx(folder, port, grpc_port if grpc else None)
        url = f"http://127.0.0.1:{port}"
        tensors = _tensors()
        payload = http_load_spec(
            url, "simple", "", tensors, mode="concurrency", concurrency=1
        ).payload
        body = folder / "body.bin"
        body.write_bytes(payload.split(b"\r\n\r\n", 1)[1])
        try:
            for _ in range(repeats):
                for concurrency in concurrencies:
                    results.append(
                        _one(url, f"grpc://127.0.0.1:{grpc_port}" if grpc else None, body,
                             concurrency=concurrency, seconds=seconds, folder=folder)
                    )  # fmt: skip
        finally:
            nginx.terminate()
            nginx.wait(timeout=10)
    return results


def _one(
    url: str, grpc_url: str | None, body: Path, *, concurrency: int, seconds: float, folder: Path
) -> LoadResult:
    wrk, wrk_cpu = run_wrk_measured(
        f"{url}/v2/models/simple/infer", body, concurrency, seconds, folder
    )
    tensors = _tensors()
    failed = 0
    rates: dict[str, tuple[float, float]] = {}
    cpu: dict[str, float] = {}
    for protocol in ("http", "grpc") if grpc_url else ("http",):
        make = http_load_spec if protocol == "http" else grpc_load_spec
        spec = make(
            url if protocol == "http" else str(grpc_url), "simple", "", tensors,
            mode="concurrency", concurrency=concurrency,
        )  # fmt: skip
        one, cpu[protocol], bad = run_spec(spec, 1, seconds)
        two = one
        if concurrency > 1:
            two, _, more_bad = run_spec(spec, 2, seconds)
            bad += more_bad
        rates[protocol] = (one, two)
        failed += bad
    nan = float("nan")
    grpc_one, grpc_two = rates.get("grpc", (nan, nan))
    return LoadResult(
        concurrency, wrk, wrk_cpu, *rates["http"], cpu["http"], grpc_one, grpc_two,
        cpu.get("grpc", nan), failed,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--no-grpc", action="store_true", help="HTTP only, as before")
    args = parser.parse_args()
    _check_tools()
    print(
        "concurrency | wrk req/s | ours 1 proc req/s | ours 2 procs req/s | best/wrk"
        " | client µs/req (1 proc) | wrk µs/req | gRPC best req/s | gRPC best/wrk | gRPC µs/req"
    )
    for result in measure(CONCURRENCIES, args.seconds, args.repeats, grpc=not args.no_grpc):
        print(
            f"{result.concurrency:>11} | {result.wrk:>9.0f} | {result.http_one:>17.0f} | "
            f"{result.http_two:>18.0f} | {result.http_best / result.wrk:>8.2f} | "
            f"{result.http_cpu_per_request * 1e6:>6.1f} | "
            f"{result.wrk_cpu_per_request * 1e6:>6.1f} | {result.grpc_best:>15.0f} | "
            f"{result.grpc_best / result.wrk:>13.2f} | {result.grpc_cpu_per_request * 1e6:>6.1f}"
            + (f" | {result.failed} failed" if result.failed else "")
        )


if __name__ == "__main__":
    main()
