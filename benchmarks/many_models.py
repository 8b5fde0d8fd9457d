"""A many-model KServe v2 server for the scale benchmark, standard library only.

``N`` identical identity models ``m0000`` … (one FP32 input ``INPUT0`` [-1, 16], output
``OUTPUT0``, ``max_batch_size`` 8), each with its own counters, behind Triton 2.51's
HTTP API and a Triton-style ``/metrics`` page on a second port:

* ``GET /v2`` (server metadata, Triton's extension list: the canary asks it whether
  binary tensors are spoken), ``/v2/health/ready``, ``/v2/health/live``;
* ``GET /v2/models/{m}[/versions/{v}]`` (metadata), ``…/ready``, ``…/config`` (the
  shape of ``tests/fixtures/triton_grpc/batching.config.http.json``), ``…/stats`` and
  ``GET /v2/models/stats`` (Triton's statistics shape; the counters grow with every
  inference);
* ``POST /v2/models/{m}[/versions/{v}]/infer``: JSON tensors or Triton's binary tensor
  extension (``Inference-Header-Content-Length``); the answer echoes the input as
  ``OUTPUT0``, binary when the request asks for binary outputs;
* ``POST /v2/repository/index``: every model READY;
* ``GET /metrics`` on the metrics port: Triton 24.07+'s per-model families
  (``tests/fixtures/triton_metrics/sample_04.txt``: integers, failures by ``reason``).

Every request is counted by kind (:data:`KINDS`); ``GET /bench/counts`` on the API port
answers the counts as JSON and is not counted itself. The benchmark reads them to
report calls per minute.

Why not the simulator (``tritonwatch simulate``): it models each model's batcher,
instances and a shared simulated GPU on aiohttp, and it is the product's own code; the
scale benchmark wants a server whose cost per model is a few dictionaries, so that at
1 000 models the machine's CPU goes to the daemon under test, and whose answers do not
depend on the code being measured.

One asyncio loop serves both ports; HTTP/1.1 keep-alive, ``Content-Length`` bodies.

    python benchmarks/many_models.py --models 1000 [--ports-file FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import re
import struct
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

INPUT, OUTPUT, WIDTH, MAX_BATCH = "INPUT0", "OUTPUT0", 16, 8
KINDS = (
    "infer",
    "stats",
    "config",
    "metadata",
    "index",
    "server",
    "ready",
    "health",
    "metrics",
    "other",
)
"""What the server counts: ``server`` is ``GET /v2``, ``ready`` a model's readiness,
``health`` the server's; ``other`` anything it does not know (answered 404)."""
EXTENSIONS = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
)
"""Triton 2.51's extension list, in its order."""
FAILURE_REASONS = ("OTHER", "BACKEND", "CANCELED", "REJECTED")
_FAMILY_TABLE = """\
nv_inference_request_success counter success \
Number of successful inference requests, all batch sizes
nv_inference_request_failure counter - \
Number of failed inference requests, all batch sizes
nv_inference_count counter inferences \
Number of inferences performed (does not include cached requests)
nv_inference_exec_count counter executions \
Number of model executions performed (does not include cached requests)
nv_inference_request_duration_us counter request_ns \
Cumulative inference request duration in microseconds (includes cached requests)
nv_inference_queue_duration_us counter queue_ns \
Cumulative inference queuing duration in microseconds (includes cached requests)
nv_inference_compute_input_duration_us counter input_ns \
Cumulative compute input duration in microseconds (does not include cached requests)
nv_inference_compute_infer_duration_us counter infer_ns \
Cumulative compute inference duration in microseconds (does not include cached requests)
nv_inference_compute_output_duration_us counter output_ns \
Cumulative inference compute output duration in microseconds (does not include cached requests)
nv_inference_pending_request_count gauge - \
Instantaneous number of pending requests awaiting execution per-model.
"""
FAMILIES = tuple(tuple(line.split(" ", 3)) for line in _FAMILY_TABLE.splitlines())
"""Triton's per-model families as 24.07–24.10 print them (name, type, the
:class:`ModelCounters` field it prints or ``-`` for 0, help), in Triton's order."""
TRITON_2_51 = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "triton_grpc"
"""Real tritonserver 2.51 answers for ``batching`` (FP32 [16], max batch 8): each
model's metadata and config are these with its own name."""


class RequestError(Exception):
    """A request the server refuses: the HTTP status and Triton's error text."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class ModelCounters:
    """One model's statistics since start, in nanoseconds."""

    success: int = 0
    inferences: int = 0
    executions: int = 0
    request_ns: int = 0
    queue_ns: int = 0
    input_ns: int = 0
    infer_ns: int = 0
    output_ns: int = 0
    last_inference_ms: int = 0
    batches: Counter[int] = field(default_factory=Counter)

    def record(self, rows: int, elapsed_ns: int) -> None:
        """One successful request of ``rows`` rows that took ``elapsed_ns`` to answer:
        a tenth queued, a tenth each reading inputs and writing outputs, six tenths
        computing (the last tenth is the server's own, as in Triton's request time)."""
        elapsed_ns = max(elapsed_ns, 1000)
        tenth = elapsed_ns // 10
        self.success += 1
        self.inferences += rows
        self.executions += 1
        self.request_ns += elapsed_ns
        self.queue_ns += tenth
        self.input_ns += tenth
        self.infer_ns += 6 * tenth
        self.output_ns += tenth
        self.batches[rows] += 1
        self.last_inference_ms = int(time.time() * 1000)

    def stats(self, name: str) -> dict[str, Any]:
        """The model's entry of ``model_stats``, as Triton 2.51 prints it over HTTP."""

        def duration(count: int, ns: int) -> dict[str, int]:
            return {"count": count, "ns": ns}

        per_request = (self.input_ns, self.infer_ns, self.output_ns)
        batch_stats = []
        for size, count in sorted(self.batches.items()):
            share = [ns * count // max(self.executions, 1) for ns in per_request]
            batch_stats.append(
                {
                    "batch_size": size,
                    "compute_input": duration(count, share[0]),
                    "compute_infer": duration(count, share[1]),
                    "compute_output": duration(count, share[2]),
                }
            )
        zero = duration(0, 0)
        return {
            "name": name,
            "version": "1",
            "last_inference": self.last_inference_ms,
            "inference_count": self.inferences,
            "execution_count": self.executions,
            "inference_stats": {
                "success": duration(self.success, self.request_ns),
                "fail": zero,
                "queue": duration(self.success, self.queue_ns),
                "compute_input": duration(self.success, self.input_ns),
                "compute_infer": duration(self.success, self.infer_ns),
                "compute_output": duration(self.success, self.output_ns),
                "cache_hit": zero,
                "cache_miss": zero,
            },
            "response_stats": {},
            "batch_stats": batch_stats,
            "memory_usage": [],
        }


def model_names(count: int) -> list[str]:
    """``m0000`` … ``m{count-1}``: sorted by name as by number."""
    return [f"m{index:04d}" for index in range(count)]


@functools.cache
def _recorded(api: str) -> dict[str, Any]:
    """A recorded answer, read once (callers copy what they change, never mutate it)."""
    document: dict[str, Any] = json.loads((TRITON_2_51 / f"batching.{api}.http.json").read_text())
    return document


def metadata(name: str) -> dict[str, Any]:
    """``GET /v2/models/{name}``: Triton 2.51's answer for ``batching``, renamed."""
    return {**_recorded("metadata"), "name": name}


def config(name: str) -> dict[str, Any]:
    """``GET /v2/models/{name}/config``: Triton 2.51's answer for ``batching``, renamed,
    its Python backend's file and parameters left out (the model is an identity)."""
    document = _recorded("config")
    group = document["instance_group"][0]
    return {
        **document,
        "name": name,
        "instance_group": [{**group, "name": f"{name}_0"}],
        "default_model_filename": "",
        "parameters": {},
    }


def _dumps(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


class ManyModels:
    """The models, their counters and the call counts: everything but the sockets."""

    def __init__(self, count: int) -> None:
        self.names = model_names(count)
        self.counters = {name: ModelCounters() for name in self.names}
        self.calls: Counter[str] = Counter(dict.fromkeys(KINDS, 0))
        self._metadata = {name: _dumps(metadata(name)) for name in self.names}
        self._config = {name: _dumps(config(name)) for name in self.names}
        self._handlers = self._handler_table()

    def _model(self, name: str) -> ModelCounters:
        found = self.counters.get(name)
        if found is None:
            raise RequestError(400, f"Request for unknown model: '{name}' is not found")
        return found

    def stats_document(self, names: list[str] | None = None) -> dict[str, Any]:
        """``GET /v2/models/stats`` (every model, by name) or one model's ``…/stats``."""
        chosen = self.names if names is None else names
        return {"model_stats": [self._model(name).stats(name) for name in chosen]}

    def index(self) -> list[dict[str, str]]:
        """``POST /v2/repository/index``: every model READY, by name."""
        return [{"name": name, "version": "1", "state": "READY"} for name in self.names]

    def metrics_page(self) -> str:
        """The ``/metrics`` page: each family's HELP and TYPE, then one line per model
        (four per model for the failures, one per reason), integers as 24.07+ print them."""
        lines = []
        for family, kind, attribute, help_text in FAMILIES:
            lines += [f"# HELP {family} {help_text}", f"# TYPE {family} {kind}"]
            for name in self.names:
                if family == "nv_inference_request_failure":
                    lines += [
                        f'{family}{{model="{name}",reason="{reason}",version="1"}} 0'
                        for reason in FAILURE_REASONS
                    ]
                    continue
                value = getattr(self.counters[name], attribute) if attribute != "-" else 0
                if attribute.endswith("_ns"):
                    value //= 1000
                lines.append(f'{family}{{model="{name}",version="1"}} {value}')
        return "\n".join(lines) + "\n"

    def infer(self, request: Request, model: str) -> Answer:
        """Answers one infer request with its input echoed as the output.

        Raises:
            RequestError: an unknown model, or a request this model cannot take.
        """
        counters = self._model(model)
        header, raw = _request_parts(request.body, request.headers.get(HEADER_LENGTH.lower()))
        rows, data = _input_tensor(header, raw)
        output: dict[str, Any] = {"name": OUTPUT, "datatype": "FP32", "shape": [rows, WIDTH]}
        answer = {"model_name": model, "model_version": "1", "outputs": [output]}
        if "id" in header:
            answer["id"] = header["id"]
        if (header.get("parameters") or {}).get("binary_data_output", False):
            output["parameters"] = {"binary_data_size": len(data)}
            head = _dumps(answer)
            reply = Answer(200, head + data, {HEADER_LENGTH: str(len(head))}, BINARY)
        else:
            output["data"] = list(struct.unpack(f"<{len(data) // 4}f", data))
            reply = Answer(200, _dumps(answer))
        counters.record(rows, time.perf_counter_ns() - request.started_ns)
        return reply

    def route(self, request: Request) -> Answer:
        """The answer to one request on the API port, counted by its kind."""
        kind, model = _classify(request.method, request.path)
        self.calls[kind] += 1
        try:
            if kind in {"ready", "metadata", "config"}:
                self._model(model)
            return self._handlers[kind](request, model)
        except RequestError as error:
            return Answer(error.status, _dumps({"error": str(error)}))

    def _handler_table(self) -> dict[str, Callable[[Request, str], Answer]]:
        return {
            "infer": self.infer,
            "server": lambda r, m: Answer(200, SERVER_METADATA),
            "health": lambda r, m: Answer(200),
            "index": lambda r, m: Answer(200, _dumps(self.index())),
            "stats": lambda r, m: Answer(200, _dumps(self.stats_document([m] if m else None))),
            "ready": lambda r, m: Answer(200),
            "metadata": lambda r, m: Answer(200, self._metadata[m]),
            "config": lambda r, m: Answer(200, self._config[m]),
            "other": lambda r, m: Answer(404, _dumps({"error": f"Not Found: {r.path}"})),
        }


HEADER_LENGTH = "Inference-Header-Content-Length"
JSON, BINARY, TEXT = "application/json", "application/octet-stream", "text/plain; charset=utf-8"
SERVER_METADATA = _dumps({"name": "triton", "version": "2.51.0", "extensions": list(EXTENSIONS)})


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = JSON


@dataclass(frozen=True)
class Request:
    """One HTTP request as read, and what its path names."""

    method: str
    target: str
    headers: dict[str, str] = field(default_factory=dict)
    """Lower-cased names."""
    body: bytes = b""
    started_ns: int = 0
    """``time.perf_counter_ns()`` when its first line arrived."""

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


_MODEL_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?(/[a-z]+)?$")
_MODEL_KINDS = {
    ("GET", ""): "metadata",
    ("GET", "/ready"): "ready",
    ("GET", "/config"): "config",
    ("GET", "/stats"): "stats",
    ("POST", "/infer"): "infer",
}


_FIXED_PATHS = {
    ("GET", "/v2"): "server",
    ("GET", "/v2/health/ready"): "health",
    ("GET", "/v2/health/live"): "health",
    ("POST", "/v2/repository/index"): "index",
    ("GET", "/v2/models/stats"): "stats",
}


def _classify(method: str, path: str) -> tuple[str, str]:
    """(kind, model name or "") of a request to the API port."""
    fixed = _FIXED_PATHS.get((method, path))
    if fixed is not None:
        return fixed, ""
    match = _MODEL_PATH.match(path)
    if match is not None:
        kind = _MODEL_KINDS.get((method, match.group(3) or ""))
        if kind is not None:
            return kind, unquote(match.group(1))
    return "other", ""


def _request_parts(body: bytes, header_length: str | None) -> tuple[dict[str, Any], bytes]:
    """The request's JSON header and the binary data after it (empty for JSON tensors)."""
    try:
        split = len(body) if header_length is None else int(header_length)
        if not 0 <= split <= len(body):
            raise ValueError(f"Inference-Header-Content-Length {split} past the body")
        request = json.loads(body[:split])
    except ValueError as error:
        raise RequestError(400, f"failed to parse the request JSON: {error}") from None
    if not isinstance(request, dict):
        raise RequestError(400, "the request is not a JSON object")
    return request, body[split:]


def _input_tensor(request: dict[str, Any], raw: bytes) -> tuple[int, bytes]:
    """(rows, little-endian FP32 bytes) of the one input, from binary data or JSON."""
    inputs = request.get("inputs")
    if not isinstance(inputs, list) or len(inputs) != 1 or not isinstance(inputs[0], dict):
        raise RequestError(400, f"expected 1 input ({INPUT}), got {inputs!r:.80}")
    tensor = inputs[0]
    shape = tensor.get("shape")
    if tensor.get("name") != INPUT or tensor.get("datatype") != "FP32":
        raise RequestError(400, f"unexpected input {tensor.get('name')!r} {tensor.get('datatype')}")
    if not (
        isinstance(shape, list)
        and len(shape) == 2
        and shape[1] == WIDTH
        and isinstance(shape[0], int)
        and 1 <= shape[0] <= MAX_BATCH
    ):
        raise RequestError(400, f"unexpected shape {shape!r:.40} for input {INPUT}")
    rows = shape[0]
    size = (tensor.get("parameters") or {}).get("binary_data_size")
    if size is not None:
        data = raw[:size]
    else:
        values = tensor.get("data")
        flat = _flattened(values)
        try:
            data = struct.pack(f"<{len(flat)}f", *flat)
        except struct.error as error:
            raise RequestError(400, f"input {INPUT}: {error}") from None
    if len(data) != rows * WIDTH * 4:
        raise RequestError(400, f"input {INPUT}: {len(data)} bytes for shape {shape}")
    return rows, data


def _flattened(values: Any) -> list[Any]:
    if not isinstance(values, list):
        raise RequestError(400, f"input {INPUT} has neither data nor binary_data_size")
    flat: list[Any] = []
    for value in values:
        flat.extend(_flattened(value) if isinstance(value, list) else [value])
    return flat


# -- the sockets ------------------------------------------------------------------------

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found"}


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request on the connection; None once the client has closed it."""
    request_line = await reader.readline()
    if not request_line:
        return None
    started_ns = time.perf_counter_ns()
    method, target, _version = request_line.decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in {b"\r\n", b"\n", b""}:
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    body = await reader.readexactly(length) if length else b""
    return Request(method, target, headers, body, started_ns)


def _metrics_answer(models: ManyModels, request: Request) -> Answer:
    if request.path != "/metrics":
        return Answer(404, b"", content_type=TEXT)
    models.calls["metrics"] += 1
    return Answer(200, models.metrics_page().encode(), content_type=TEXT)


def _api_answer(models: ManyModels, request: Request) -> Answer:
    if request.method == "GET" and request.path == "/bench/counts":  # the benchmark's own
        return Answer(200, _dumps(dict(models.calls)))
    return models.route(request)


async def _serve_connection(
    answer: Callable[[Request], Answer],
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    """HTTP/1.1 requests on one keep-alive connection until the client closes it."""
    with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, ValueError):
        while (request := await _read_request(reader)) is not None:
            reply = answer(request)
            head = [
                f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Error')}",
                f"Content-Type: {reply.content_type}",
                f"Content-Length: {len(reply.body)}",
            ]
            head += [f"{name}: {value}" for name, value in reply.headers.items()]
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + reply.body)
            await writer.drain()
            if request.headers.get("connection", "").lower() == "close":
                break
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def serve(models: ManyModels, ports_file: Path | None) -> None:
    """Both ports on 127.0.0.1 (free ports the kernel picks), written to ``ports_file``
    as ``{"http": P, "metrics": Q}`` once both listen; runs until cancelled."""

    def handler(answer: Callable[[ManyModels, Request], Answer]) -> Any:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await _serve_connection(lambda request: answer(models, request), reader, writer)

        return handle

    api = await asyncio.start_server(handler(_api_answer), "127.0.0.1", 0, backlog=1024)
    metrics = await asyncio.start_server(handler(_metrics_answer), "127.0.0.1", 0, backlog=128)
    ports = {
        "http": api.sockets[0].getsockname()[1],
        "metrics": metrics.sockets[0].getsockname()[1],
    }
    text = json.dumps(ports)
    if ports_file is not None:
        temporary = ports_file.with_suffix(".tmp")
        temporary.write_text(text)
        temporary.replace(ports_file)
    print(text, flush=True)
    async with api, metrics:
        await asyncio.gather(api.serve_forever(), metrics.serve_forever())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=20)
    parser.add_argument("--ports-file", type=Path, help="where to write the ports as JSON")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(ManyModels(args.models), args.ports_file))


if __name__ == "__main__":
    main()
