"""How many inferences per second the simulator sustains on one core.

The simulator runs as ``python -m tritonwatch.sim`` pinned to CPU 0 with a trivial model
(zero service time, no batching), so everything measured is the simulator's own cost:
protocol parsing, the batcher, accounting, encoding. Load comes from separate processes
pinned to the other CPUs using the real ``tritonclient`` (HTTP sync in threads, gRPC
sync in threads), after a warm-up, for ``--seconds`` per protocol. A third figure drives
the same model in process (no sockets) to show the engine's own ceiling.

``http-raw`` sends the very bytes ``tritonclient.http`` would (encoded once by its
``generate_request_body``) over a keep-alive connection: a client cheap enough to
saturate the simulator from the single remaining core of a 2-core machine.

Besides the achieved rate it reports the simulator's CPU use (from /proc) and so its
cost per inference: if its core is not saturated, the clients were the limit and
``1e6 / µs-per-inference`` is the simulator's one-core capacity.

Usage: ``python benchmarks/sim_capacity.py [--seconds 10] [--clients 3] [--threads 4]``
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

TRIVIAL_MODEL_SET = {
    "gpus": [{"uuid": "GPU-51a7c0de-0000-4000-8000-00000000beef"}],
    "models": [
        {
            "name": "trivial",
            "max_batch_size": 8,
            "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [16]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [16]}],
            "compute": "identity",
            "timing": {
                "compute_input": 0,
                "compute_input_per_item": 0,
                "compute_infer": 0,
                "compute_infer_per_item": 0,
                "compute_output": 0,
                "compute_output_per_item": 0,
                "noise_sigma": 0,
            },
        }
    ],
}
SERVER_CPU = 0
COLUMNS = (
    "protocol",
    "inferences_per_s",
    "server_cpu_busy",
    "server_cpu_us_per_inference",
    "one_core_capacity_per_s",
)
START_TIMEOUT_S = 30.0
WARMUP_S = 1.0

_SERVE = (
    "import os, runpy, sys; os.sched_setaffinity(0, {%d}); "
    "sys.argv = ['tritonwatch.sim'] + sys.argv[1:]; "
    "runpy.run_module('tritonwatch.sim', run_name='__main__')"
)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _client_process(
    protocol: str, url: str, *, threads: int, seconds: float, cpus: set[int], results: Any
) -> None:
    """One load process: ``threads`` sync clients hammering ``trivial`` until the deadline."""
    os.sched_setaffinity(0, cpus)
    import tritonclient.grpc as grpcclient  # noqa: PLC0415 (imported after pinning)
    import tritonclient.http as httpclient  # noqa: PLC0415

    module: Any = grpcclient if protocol == "grpc" else httpclient
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    counts = [0] * threads
    start_at = time.monotonic() + WARMUP_S
    stop_at = start_at + seconds

    def worker(index: int) -> None:
        client = module.InferenceServerClient(url)
        tensor = module.InferInput("INPUT0", [1, 16], "INT32")
        tensor.set_data_from_numpy(data)
        send = (
            (lambda: client.infer("trivial", [tensor]))
            if protocol != "http-raw"
            else _raw_sender(url, client, tensor)
        )
        while (now := time.monotonic()) < stop_at:
            send()
            if now >= start_at:
                counts[index] += 1
        client.close()

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    results.put(sum(counts))


def _raw_sender(url: str, client: Any, tensor: Any) -> Any:
    """Posts the exact body tritonclient.http would send, pre-encoded once, over keep-alive:
    a client cheap enough to saturate the simulator from one core."""
    import http.client  # noqa: PLC0415

    body, json_size = client.generate_request_body([tensor])
    headers = {"Content-Type": "application/octet-stream"}
    if json_size is not None:
        headers["Inference-Header-Content-Length"] = str(json_size)
    host, port = url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port))

    def send() -> None:
        connection.request("POST", "/v2/models/trivial/infer", body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}")

    return send


def _serve(models_file: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _SERVE % SERVER_CPU,
            "--models",
            models_file,
            "--http-port",
            "0",
            "--grpc-port",
            "0",
            "--metrics-port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(process.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(START_TIMEOUT_S)
    if not line or "=" not in line[0]:
        process.kill()
        raise RuntimeError("the simulator did not start")
    return process, dict(part.split("=", 1) for part in line[0].split())


def measure_protocol(
    protocol: str,
    endpoints: dict[str, str],
    pid: int,
    args: argparse.Namespace,
    client_cpus: set[int],
) -> dict[str, Any]:
    """Runs the client processes against one protocol; returns the figures."""
    url = endpoints["grpc"] if protocol == "grpc" else endpoints["http"]
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    processes = [
        context.Process(
            target=_client_process,
            args=(protocol, url),
            kwargs={
                "threads": args.threads,
                "seconds": args.seconds,
                "cpus": client_cpus,
                "results": results,
            },
        )
        for _ in range(args.clients)
    ]
    for process in processes:
        process.start()
    time.sleep(WARMUP_S + 0.5)  # the clients count only after their own warm-up
    cpu_before, wall_before = _cpu_seconds(pid), time.monotonic()
    time.sleep(args.seconds - 1.0)
    cpu_after, wall_after = _cpu_seconds(pid), time.monotonic()
    total = sum(results.get(timeout=args.seconds + 60) for _ in processes)
    for process in processes:
        process.join(30)
    rate = total / args.seconds
    busy = (cpu_after - cpu_before) / (wall_after - wall_before)
    return {
        "protocol": protocol,
        "inferences_per_s": round(rate),
        "server_cpu_busy": round(busy, 3),
        "server_cpu_us_per_inference": round(busy / rate * 1e6, 1) if rate else None,
        "one_core_capacity_per_s": round(rate / busy) if busy else None,
        "client_processes": args.clients,
        "threads_per_process": args.threads,
    }


def measure_in_process(seconds: float) -> dict[str, Any]:
    """The engine alone on this process's core: closed-loop load without sockets."""
    os.sched_setaffinity(0, {SERVER_CPU})
    from tritonwatch.sim.load import closed_loop  # noqa: PLC0415
    from tritonwatch.sim.models import parse_model_set  # noqa: PLC0415
    from tritonwatch.sim.server import Simulator  # noqa: PLC0415

    with Simulator(parse_model_set(TRIVIAL_MODEL_SET)) as sim:
        sim.run_async(
            lambda core: closed_loop(core, "trivial", concurrency=32, duration_s=WARMUP_S)
        )
        cpu_before = time.process_time()
        result = sim.run_async(
            lambda core: closed_loop(core, "trivial", concurrency=32, duration_s=seconds)
        )
        cpu = time.process_time() - cpu_before
    return {
        "protocol": "in-process",
        "inferences_per_s": round(result.throughput),
        "server_cpu_busy": round(cpu / result.elapsed_s, 3),
        "server_cpu_us_per_inference": round(cpu / result.completed * 1e6, 1),
        "one_core_capacity_per_s": round(result.completed / cpu),
    }


PROTOCOLS = ("http", "http-raw", "grpc")


def measure(
    seconds: float = 10.0,
    clients: int = 3,
    threads: int = 4,
    protocols: tuple[str, ...] = PROTOCOLS,
) -> list[dict[str, Any]]:
    """One row per protocol and one for the engine in process (see COLUMNS). Needs at
    least 2 CPUs: one for the simulator, the rest for the clients."""
    args = argparse.Namespace(seconds=seconds, clients=clients, threads=threads)
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise RuntimeError("needs at least 2 CPUs: one for the simulator, the rest for clients")
    client_cpus = {cpu for cpu in cpus if cpu != SERVER_CPU}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(TRIVIAL_MODEL_SET, handle)  # JSON is YAML
    rows = []
    process, endpoints = _serve(handle.name)
    try:
        for protocol in protocols:
            rows.append(measure_protocol(protocol, endpoints, process.pid, args, client_cpus))
    finally:
        process.terminate()
        process.wait(10)
        Path(handle.name).unlink()
    # The engine alone runs in a child so that pinning it leaves the caller unpinned.
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        rows.append(pool.apply(measure_in_process, (seconds,)))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per protocol")
    parser.add_argument("--clients", type=int, default=3, help="client processes")
    parser.add_argument("--threads", type=int, default=4, help="client threads per process")
    args = parser.parse_args()
    try:
        rows = measure(args.seconds, args.clients, args.threads)
    except RuntimeError as error:
        sys.stderr.write(f"{error}\n")
        return 1
    lines = [
        f"# sim_capacity {datetime.date.today()} {platform.node()} "
        f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}; simulator pinned to CPU {SERVER_CPU}",
        " | ".join(COLUMNS),
        *(" | ".join(str(row[key]) for key in COLUMNS) for row in rows),
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
