"""Differential: the simulator against real Triton 2.51 — same model configs, same requests.

The simulator and our client were written by the same hands and agreed with each other
while real Triton disagreed. Here one real ``tritonserver`` serves test models of
``tests/triton_models`` — three plain ones (``batching``, ``needs_two``, ``text``), the
ensemble ``pipeline`` with its steps ``prep``, ``core`` and ``post``, the stateful
``seq`` and the cache-enabled ``cached``, with the server's response cache on — and one
simulator serves their twins (``real_triton_models.yaml``); every request goes to both
and a test compares what a client sees: HTTP status, content type and body, gRPC status
and message, the config, statistics and repository JSON, ``/metrics`` families and the
counts that move, and response compression.

Where the real server's answer is a fixed string a client may depend on, the string is
recorded here (from tritonserver 2.51.0) and both servers must give it: if Triton ever
changes it, the test says which side moved. What the simulator does differently on
purpose is listed in ``INTENDED_DIFFERENCES`` (and in docs/simulator.md, "Differences
from real Triton"); every test that makes an exception names its entry.
"""

from __future__ import annotations

import copy
import gzip
import itertools
import json
import shutil
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc as grpclib
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from google.protobuf import json_format  # type: ignore[import-untyped]
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from real_triton import CACHE_SIZE_BYTES, RealTriton
from real_triton import MODELS as TRITON_MODELS
from support import wait_until
from tritonwatch.sim.models import ModelSet, load_model_set, parse_model_set
from tritonwatch.sim.server import Simulator

# One worker runs the whole module under xdist, so its private servers start once.
pytestmark = [pytest.mark.real, pytest.mark.xdist_group("differential_real_triton")]

MODELS = ("batching", "cached", "core", "needs_two", "pipeline", "post", "prep", "seq", "text")
"""By name, as Triton lists its repository."""
RESTRICTED_MODELS = ("batching", "cached", "needs_two", "text")
"""What the servers outside explicit model control load (all of their repository)."""
MODEL_SET = Path(__file__).with_name("real_triton_models.yaml")
SETTLE_TIMEOUT_S = 30.0
JSON = "application/json"
TEXT = "text/plain"

INTENDED_DIFFERENCES: dict[str, str] = {
    # Mirrors docs/simulator.md, "Differences from real Triton".
    "gpu-families": "the simulator simulates GPUs (it exists to show GPU scenarios a CPU "
    "Triton cannot); real Triton on a host without GPUs exports no nv_gpu_* / "
    "nv_energy_consumption families",
    "service-times": "durations come from the cost model, not from a backend (a Python "
    "backend adds its stub's overhead); tests compare counts, never durations",
    "json-parse-detail": "a body that is not JSON gets Triton's status and message prefix, "
    "but the parser's own detail is Python's, not RapidJSON's",
    "unloading-state": "real Triton lists a model as UNLOADING for about a second while its "
    "Python-backend stub stops; the simulator goes straight to UNAVAILABLE/unloaded "
    "(tests compare the settled state)",
    "never-loaded": "the simulator loads every model of its model set at start, so the "
    "name-only index entry Triton shows for a repository folder it never loaded cannot occur",
    "unserved-extensions": "shared memory, trace, logging and classification are listed "
    "(Triton's static list) but not simulated: their endpoints answer 404 Not Found",
    "implicit-instance-group": "the simulator always has an instance group, so a config.pbtxt "
    "without one is written with Triton's implicit group (named after the model)",
    "default-model-filename": "filled in for the python and onnxruntime backends only",
    "model-files": "file: parameters in a load request are always refused (no model files)",
    "header-length": "a malformed Inference-Header-Content-Length is a 400 that says so; "
    "Triton misreads the body",
    "header-whitespace": "aiohttp strips spaces around header values, so 'gzip ' compresses",
    "input-order": "the inputs named in the count error come in request order, Triton's in "
    "its hash map's",
    "headers-and-order": "aiohttp adds Date and Server; /metrics families and series come "
    "in another order",
    "generate-llm-only": "generate, generate_stream and the OpenAI routes serve LLM models "
    "only; a plain model gets 501",
    "openai-port": "the OpenAI routes share the HTTP port with Triton's API",
    "vllm-families-on-triton-page": "a vllm model's vllm:* server families appear on "
    "Triton's /metrics",
    "first-response-histogram": "nv_inference_first_response_histogram_ms (24.11+) can be "
    "turned on although the simulator reports 2.51.0",
    "token-text": "tokens are token0, token1, …; prompt tokens are words × prompt_tokens_per_word",
    "ensemble-queue": "an ensemble's own queue time is exactly 0 (Triton's: a few µs)",
    "cache-costs": "cache lookups and insertions cost modelled microseconds; nv_cache_util "
    "counts 80 bytes per entry beyond its outputs",
    "control-inputs": "a stateful model's control inputs are printed in its config but never "
    "reach its compute",
    "sequence-slots": "slots are max_batch_size per instance; oldest batches with the dynamic "
    "batcher's rule",
}

GPU_FAMILIES = {
    "nv_gpu_utilization",
    "nv_gpu_memory_total_bytes",
    "nv_gpu_memory_used_bytes",
    "nv_gpu_power_usage",
    "nv_gpu_power_limit",
    "nv_energy_consumption",
}
"""Families only the simulator exports, all under ``INTENDED_DIFFERENCES["gpu-families"]``."""
COUNTED = (
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_pending_request_count",
    "nv_cache_num_hits_per_model",
    "nv_cache_num_misses_per_model",
)
"""Per-model series whose values the same sequential traffic fixes exactly."""


# -- one request to both servers ----------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """What an HTTP client sees: status, headers (lower-case names) and the raw body."""

    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def media_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0]

    def json(self) -> Any:
        return json.loads(self.body)


def http_call(
    base: str,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    """One HTTP request (no automatic decompression); any status comes back as an Answer."""
    data = None if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return Answer(response.status, _lower(response.headers), response.read())
    except urllib.error.HTTPError as error:
        with error:
            return Answer(error.code, _lower(error.headers), error.read())


def _lower(headers: Any) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


@dataclass
class Pair:
    """A real Triton and the simulator serving the same models."""

    real: RealTriton
    sim: Simulator

    def both(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[Answer, Answer]:
        """The same request to the real server, then to the simulator."""
        return (
            http_call(self.real.http_url, method, path, body, headers),
            http_call(self.sim.http_url, method, path, body, headers),
        )

    def metrics(self) -> tuple[str, str]:
        return (
            http_call(self.real.metrics_url, "GET", "").body.decode(),
            http_call(self.sim.metrics_url, "GET", "").body.decode(),
        )

    def grpc_addresses(self) -> dict[str, str]:
        return {"real": self.real.grpc_address, "sim": self.sim.grpc_url}

    def reset(self, model: str) -> None:
        """Unload, then load: the only way back to the file config (a load without a
        config keeps an override in real Triton 2.51, and in the simulator)."""
        self.unload(model)
        for side in (self.real.http_url, self.sim.http_url):
            answer = http_call(side, "POST", f"/v2/repository/models/{model}/load", {})
            assert answer.status == 200, answer

    def unload(self, model: str) -> None:
        """Unloads ``model`` on both and waits until real Triton has finished unloading."""
        for side in (self.real.http_url, self.sim.http_url):
            answer = http_call(side, "POST", f"/v2/repository/models/{model}/unload", {})
            assert answer.status == 200, answer
        wait_until(
            lambda: settled(self.real.http_url, model),
            SETTLE_TIMEOUT_S,
            f"real Triton to finish unloading {model}",
        )


def settled(base: str, model: str) -> bool:
    """True once ``model`` is no longer UNLOADING (``INTENDED_DIFFERENCES["unloading-state"]``)."""
    index = http_call(base, "POST", "/v2/repository/index", {}).json()
    return all(entry.get("state") != "UNLOADING" for entry in index if entry["name"] == model)


def copy_models(models: tuple[str, ...], repository: Path) -> None:
    """Copies test models (model.py links resolved) into a repository of just these."""
    for model in models:
        shutil.copytree(
            TRITON_MODELS / model,
            repository / model,
            ignore=shutil.ignore_patterns("__pycache__"),
        )


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """A real Triton with only these models in its repository (every test server has a
    response cache: real_triton.py), and their simulator with a cache of the same size.

    Private: whole-server answers (the repository index, all-model statistics, /metrics)
    must list exactly the simulator's models, which the session's server cannot."""
    root = tmp_path_factory.mktemp("differential")
    repository = root / "models"
    copy_models(MODELS, repository)
    real = RealTriton(MODELS, repository=repository, log_path=root / "tritonserver.log")
    real.start()
    try:
        with Simulator(MODEL_SET, response_cache_bytes=CACHE_SIZE_BYTES) as sim:
            yield Pair(real, sim)
    finally:
        real.stop()


def restricted_model_set() -> ModelSet:
    """The twins of ``RESTRICTED_MODELS`` only."""
    whole = load_model_set(MODEL_SET)
    models = [m.model_dump() for m in whole.models if m.name in RESTRICTED_MODELS]
    gpus = [gpu.model_dump() for gpu in whole.gpus]
    return parse_model_set({"gpus": gpus, "models": models}, source="<restricted twins>")


FP32_ROWS = {"batching", "cached", "core", "pipeline", "post", "prep", "seq"}
"""The models whose input is INPUT0 FP32 [-1, 16]."""


def infer_body(model: str, rows: int = 1, value: float = 0.5, **extra: Any) -> dict[str, Any]:
    """A valid JSON inference request for ``model`` (``rows`` rows where it batches)."""
    if model in FP32_ROWS:
        tensor = {
            "name": "INPUT0",
            "datatype": "FP32",
            "shape": [rows, 16],
            "data": [value] * 16 * rows,
        }
    elif model == "needs_two":
        tensor = {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [0.25] * 4}
    else:
        tensor = {"name": "TEXT", "datatype": "BYTES", "shape": [rows, 1], "data": ["hi"] * rows}
    return {"inputs": [tensor], **extra}


@pytest.fixture(scope="module")
def traffic(pair: Pair) -> None:
    """The same sequential requests to both (each executes alone), valid and invalid."""
    send_traffic(pair)


_ROUNDS = itertools.count(1)
"""Numbers each round of traffic: the cached model's first request of a round is new."""
SEQUENCE_ID = 1001
SEQUENCE_REFUSALS = {
    "no correlation id": (
        {},
        1,
        "inference request to model 'seq' must specify a non-zero or non-empty correlation ID",
    ),
    "no START": (
        {"sequence_id": 999_999},
        1,
        "inference request for sequence 999999 to model 'seq' must specify the START flag "
        "on the first request of the sequence",
    ),
    "batch of 2": (
        {"sequence_id": SEQUENCE_ID, "sequence_start": True},
        2,
        "inference request to model 'seq' must specify batch-size 1 due to requirements of "
        "sequence batcher",
    ),
}
"""Requests real tritonserver 2.51's sequence batcher refuses (HTTP 400), with its text:
(parameters, rows, error)."""


def send_traffic(pair: Pair) -> None:
    """The requests of :func:`traffic`; answers checked to match: plain models, two
    ensemble requests, a new and a repeated request to the cached model (a miss, then a
    hit), one sequence of three requests and the sequence batcher's refusals."""
    unique = float(next(_ROUNDS))
    plain = [
        ("batching", 1),
        ("batching", 1),
        ("batching", 3),
        ("needs_two", 1),
        ("needs_two", 1),
        ("text", 1),
        ("text", 2),
        ("pipeline", 1),
        ("pipeline", 2),
    ]
    requests = [(model, infer_body(model, rows)) for model, rows in plain]
    requests += [("cached", infer_body("cached", value=unique))] * 2
    for flags in ({"sequence_start": True}, {}, {"sequence_end": True}):
        parameters = {"sequence_id": SEQUENCE_ID, **flags}
        requests.append(("seq", infer_body("seq", parameters=parameters)))
    for model, body in requests:
        real, sim = pair.both("POST", f"/v2/models/{model}/infer", body)
        assert (real.status, sim.status) == (200, 200), (model, body, real, sim)
        assert real.json() == sim.json()
    for parameters, rows, error in SEQUENCE_REFUSALS.values():
        body = infer_body("seq", rows, parameters=parameters)
        for answer in pair.both("POST", "/v2/models/seq/infer", body):
            assert (answer.status, answer.json()) == (400, {"error": error})
    wrong_shape = {
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 8], "data": [0.5] * 8}]
    }
    wrong_type = {
        "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}]
    }
    for body in (wrong_shape, wrong_type, {"inputs": []}):
        real, sim = pair.both("POST", "/v2/models/batching/infer", body)
        assert (real.status, sim.status) == (400, 400), (real, sim)


# -- server and model metadata, health --------------------------------------------------


def test_server_metadata_matches(pair: Pair) -> None:
    """GET /v2 names the same server, version and extensions (in Triton's order)."""
    real, sim = pair.both("GET", "/v2")
    assert real.json() == {
        "name": "triton",
        "version": "2.51.0",
        "extensions": [
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
        ],
    }
    assert sim.json() == real.json()
    assert sim.media_type == real.media_type == JSON


def test_grpc_server_metadata_matches(pair: Pair) -> None:
    """gRPC ServerMetadata gives the same name, version and extension list."""
    answers = {}
    for side, address in pair.grpc_addresses().items():
        client = grpcclient.InferenceServerClient(address)
        try:
            answers[side] = json_format.MessageToDict(client.get_server_metadata())
        finally:
            client.close()
    assert answers["sim"] == answers["real"]


@pytest.mark.parametrize(
    "path",
    [
        "/v2/trace/setting",
        "/v2/logging",
        "/v2/systemsharedmemory/status",
        "/v2/cudasharedmemory/status",
    ],
)
def test_unserved_extensions_differ_as_documented(pair: Pair, path: str) -> None:
    """Listed-but-unsimulated extensions: Triton answers, the simulator says Not Found (intended)."""
    real, sim = pair.both("GET", path)
    assert (real.status, real.media_type) == (200, JSON)
    assert (sim.status, sim.media_type, sim.json()) == (404, TEXT, {"error": "Not Found"})


@pytest.mark.parametrize("path", ["/v2/health/live", "/v2/health/ready", "/v2/models/text/ready"])
def test_health_answers_match(pair: Pair, path: str) -> None:
    """Health and readiness: 200, text/plain, empty body on both."""
    real, sim = pair.both("GET", path)
    assert (real.status, real.media_type, real.body) == (200, TEXT, b"")
    assert (sim.status, sim.media_type, sim.body) == (real.status, real.media_type, real.body)


@pytest.mark.parametrize("model", MODELS)
def test_model_metadata_matches(pair: Pair, model: str) -> None:
    """GET /v2/models/{m}: same name, versions, platform and tensors (batch dim -1)."""
    real, sim = pair.both("GET", f"/v2/models/{model}")
    assert real.status == sim.status == 200
    assert sim.json() == real.json()


# -- configuration ---------------------------------------------------------------------------


def key_paths(document: Any, prefix: str = "") -> set[str]:
    """Every key path of a JSON document: ``a.b``, lists as ``a[].b``."""
    paths: set[str] = set()
    if isinstance(document, dict):
        for key, value in document.items():
            path = f"{prefix}.{key}"
            paths.add(path)
            paths |= key_paths(value, path)
    elif isinstance(document, list):
        for item in document:
            paths |= key_paths(item, prefix + "[]")
    return paths


@pytest.mark.parametrize("model", MODELS)
def test_config_keys_match(pair: Pair, model: str) -> None:
    """The config JSON has the same keys, recursively, defaults included, in Triton's order."""
    real, sim = pair.both("GET", f"/v2/models/{model}/config")
    assert real.status == sim.status == 200
    assert key_paths(sim.json()) == key_paths(real.json())
    assert list(sim.json()) == list(real.json())  # top-level keys in Triton's order


@pytest.mark.parametrize("model", MODELS)
def test_config_values_match(pair: Pair, model: str) -> None:
    """The whole config is the same document (normalised batching, group names, parameters)."""
    real, sim = pair.both("GET", f"/v2/models/{model}/config")
    assert sim.json() == real.json()


@pytest.mark.parametrize("model", MODELS)
def test_grpc_config_matches(pair: Pair, model: str) -> None:
    """gRPC ModelConfig carries the same configuration as HTTP, on both servers."""
    configs = {}
    for side, address in pair.grpc_addresses().items():
        client = grpcclient.InferenceServerClient(address)
        try:
            message = client.get_model_config(model).config
        finally:
            client.close()
        configs[side] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    assert configs["sim"] == configs["real"]


def _load(pair: Pair, model: str, config: dict[str, Any]) -> tuple[Answer, Answer]:
    body = {"parameters": {"config": json.dumps(config)}}
    return pair.both("POST", f"/v2/repository/models/{model}/load", body)


def test_config_override_loads_match(pair: Pair) -> None:
    """Override loads (count only, other field, minimal, plain reload) leave equal configs and stats."""
    original = pair.both("GET", "/v2/models/batching/config")[0].json()
    try:
        counted = copy.deepcopy(original)
        counted["instance_group"][0]["count"] = 2
        delayed = copy.deepcopy(counted)
        delayed["dynamic_batching"]["max_queue_delay_microseconds"] = 500
        minimal = {key: original[key] for key in ("backend", "max_batch_size", "input", "output")}
        for override in (counted, delayed, minimal, None):
            if override is None:  # a plain load
                answers = pair.both("POST", "/v2/repository/models/batching/load", {})
            else:
                answers = _load(pair, "batching", override)
            assert [(a.status, a.body) for a in answers] == [(200, b"")] * 2, answers
            real, sim = pair.both("GET", "/v2/models/batching/config")
            assert sim.json() == real.json(), override
            real, sim = pair.both("POST", "/v2/models/batching/infer", infer_body("batching"))
            assert (real.status, sim.status) == (200, 200)
            wait_until(  # real Triton counts a request after it has sent the answer
                lambda: (
                    _model_stats(pair.real.http_url, "batching")["inference_stats"]["success"][
                        "count"
                    ]
                    >= 1
                ),
                SETTLE_TIMEOUT_S,
                "real Triton to count the request",
            )
            real, sim = pair.both("GET", "/v2/models/batching/stats")
            real_counts, sim_counts = (_counts(a.json()["model_stats"][0]) for a in (real, sim))
            assert sim_counts == real_counts, override
        assert "dynamic_batching" not in real.json() and "dynamic_batching" not in sim.json()
    finally:
        pair.reset("batching")
    real, sim = pair.both("GET", "/v2/models/batching/config")
    assert real.json() == original
    assert sim.json() == original


# -- statistics ---------------------------------------------------------------------------------


def _counts(stats: dict[str, Any]) -> dict[str, Any]:
    """The parts of a model_stats entry that the same sequential traffic fixes exactly."""
    inference = stats["inference_stats"]
    return {
        "inference_count": stats["inference_count"],
        "execution_count": stats["execution_count"],
        "counts": {stage: inference[stage]["count"] for stage in inference},
        "batch_sizes": [
            (b["batch_size"], b["compute_infer"]["count"]) for b in stats["batch_stats"]
        ],
        "ran": stats["last_inference"] > 0,
    }


TRAFFIC_SUCCESSES = {
    "batching": 3,
    "needs_two": 2,
    "text": 2,
    "pipeline": 2,
    "prep": 2,
    "core": 2,
    "post": 2,
    "cached": 2,
    "seq": 3,
}
"""Requests of :func:`send_traffic` each model answers (the refused ones count nowhere;
an ensemble's steps count its requests)."""


def _increase(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """:func:`_counts` of ``after`` less those of ``before`` (batch sizes that grew only)."""
    now, old = _counts(after), _counts(before)
    old_batches = dict(old["batch_sizes"])
    return {
        "inference_count": now["inference_count"] - old["inference_count"],
        "execution_count": now["execution_count"] - old["execution_count"],
        "counts": {stage: n - old["counts"].get(stage, 0) for stage, n in now["counts"].items()},
        "batch_sizes": [
            (size, n - old_batches.get(size, 0))
            for size, n in now["batch_sizes"]
            if n > old_batches.get(size, 0)
        ],
        "ran": now["ran"],
    }


def _model_stats(base: str, model: str) -> dict[str, Any]:
    answer = http_call(base, "GET", f"/v2/models/{model}/stats")
    assert answer.status == 200, answer
    stats: dict[str, Any] = answer.json()["model_stats"][0]
    return stats


@pytest.mark.parametrize("model", MODELS)
def test_statistics_match(pair: Pair, model: str) -> None:
    """Statistics around the same traffic: same keys, and the same increases of every
    count; refused requests count nowhere."""
    sides = (pair.real.http_url, pair.sim.http_url)
    before = [_model_stats(base, model) for base in sides]
    send_traffic(pair)
    wanted = before[0]["inference_stats"]["success"]["count"] + TRAFFIC_SUCCESSES[model]
    wait_until(
        lambda: (
            _model_stats(pair.real.http_url, model)["inference_stats"]["success"]["count"] >= wanted
        ),
        SETTLE_TIMEOUT_S,
        "real Triton to count the traffic",
    )
    real_stats, sim_stats = (_model_stats(base, model) for base in sides)
    assert key_paths(sim_stats) == key_paths(real_stats)
    assert _increase(sim_stats, before[1]) == _increase(real_stats, before[0])
    assert _increase(sim_stats, before[1])["counts"]["success"] == TRAFFIC_SUCCESSES[model]
    assert _increase(sim_stats, before[1])["counts"]["fail"] == 0


def test_all_model_statistics_match(pair: Pair) -> None:
    """GET /v2/models/stats lists the same models in the same order with the same keys."""
    send_traffic(pair)  # every model has run on both, whatever ran before
    real, sim = pair.both("GET", "/v2/models/stats")
    assert [m["name"] for m in sim.json()["model_stats"]] == [
        m["name"] for m in real.json()["model_stats"]
    ]
    assert key_paths(sim.json()) == key_paths(real.json())


# -- /metrics -------------------------------------------------------------------------------------


@dataclass
class Family:
    """One metric family as a scraper sees it."""

    kind: str
    help: str
    label_names: set[frozenset[str]]
    series: dict[tuple[str, frozenset[tuple[str, str]]], float]


def families(text: str) -> dict[str, Family]:
    parsed = {}
    for family in text_string_to_metric_families(text):
        series = {(s.name, frozenset(s.labels.items())): s.value for s in family.samples}
        parsed[family.name] = Family(
            family.type,
            family.documentation,
            {frozenset(s.labels) for s in family.samples},
            series,
        )
    return parsed


def compare_families(
    real_text: str, sim_text: str, baselines: tuple[str, str] | None = None
) -> None:
    """Same families (apart from the intended GPU ones), types, HELP texts, label names per
    family, and per-model series; counted values equal (their increases since
    ``baselines``, when given)."""
    real, sim = families(real_text), families(sim_text)
    if baselines is not None:
        real, sim = increases(real, families(baselines[0])), increases(sim, families(baselines[1]))
    assert set(real) - set(sim) == set()
    assert set(sim) - set(real) == GPU_FAMILIES, INTENDED_DIFFERENCES["gpu-families"]
    for name in sorted(set(real) & set(sim)):
        assert (sim[name].kind, sim[name].help) == (real[name].kind, real[name].help), name
        assert sim[name].label_names == real[name].label_names, name
        if "model" in {label for names in real[name].label_names for label in names}:
            assert set(sim[name].series) == set(real[name].series), name
        if name in COUNTED:
            assert sim[name].series == real[name].series, name


def increases(now: dict[str, Family], before: dict[str, Family]) -> dict[str, Family]:
    """``now`` with each counted series less its value in ``before``.

    Real Triton may keep a model's counters through an unload and load (its metric
    reporter can outlive the unload) or start them again: only increases compare."""
    counted = dict(now)
    for name in set(now) & set(COUNTED):
        family, old = now[name], before[name].series if name in before else {}
        series = {key: value - old.get(key, 0.0) for key, value in family.series.items()}
        counted[name] = Family(family.kind, family.help, family.label_names, series)
    return counted


def batching_inferences(metrics_text: str) -> float:
    series = families(metrics_text)["nv_inference_count"].series
    return sum(value for (_, labels), value in series.items() if ("model", "batching") in labels)


def successes(metrics_text: str) -> dict[str, float]:
    """``nv_inference_request_success`` by model."""
    series = families(metrics_text)["nv_inference_request_success"].series
    return {dict(labels)["model"]: value for (_, labels), value in series.items()}


def traffic_counted(metrics_text: str, before: dict[str, float]) -> bool:
    """Whether every model has counted its :data:`TRAFFIC_SUCCESSES` since ``before``."""
    now = successes(metrics_text)
    return all(now[m] >= before.get(m, 0) + n for m, n in TRAFFIC_SUCCESSES.items())


@pytest.mark.usefixtures("traffic")
def test_metrics_families_match(pair: Pair) -> None:
    """/metrics around the same traffic: same families, types, HELP, labels and counted
    increases."""
    before = pair.metrics()
    send_traffic(pair)
    # Triton counts a request a moment after its answer has gone out.
    counted = successes(before[0])
    wait_until(
        lambda: traffic_counted(pair.metrics()[0], counted),
        SETTLE_TIMEOUT_S,
        "real Triton to count the traffic",
    )
    compare_families(*pair.metrics(), baselines=before)


@pytest.fixture(scope="module")
def restricted(
    pair: Pair, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, RealTriton]]:
    """Real Tritons outside explicit model control, by mode, over a repository of
    ``RESTRICTED_MODELS`` (they load all of it).

    Private: the model-control mode and ``--metrics-config`` are server flags. The
    ``poll`` one also exports the summary families, so one server serves both tests."""
    root = tmp_path_factory.mktemp("restricted")
    copy_models(RESTRICTED_MODELS, root / "models")
    started: dict[str, RealTriton] = {}
    try:
        for mode in ("none", "poll"):
            extra = [f"--model-control-mode={mode}"]
            if mode == "poll":
                extra.append("--metrics-config=summary_latencies=true")
            started[mode] = RealTriton(
                (),
                repository=root / "models",
                extra_args=extra,
                log_path=root / f"tritonserver-{mode}.log",
            ).start()
        yield started
    finally:
        for server in started.values():
            server.stop()


def test_summary_families_match(start_sim: Any, restricted: dict[str, RealTriton]) -> None:
    """With summary latencies on, the five summary families match too (type, HELP, labels),
    and so do a cache-enabled model's: its cache hit and miss summaries, and no request
    summary for it."""
    real = restricted["poll"]
    sim = start_sim(
        models=restricted_model_set(),
        summary_latencies=True,
        model_control_mode="poll",
        response_cache_bytes=CACHE_SIZE_BYTES,
    )
    before = (
        http_call(real.metrics_url, "GET", "").body.decode(),
        http_call(sim.metrics_url, "GET", "").body.decode(),
    )
    for base in (real.http_url, sim.http_url):
        for model in ("batching", "cached"):
            answer = http_call(base, "POST", f"/v2/models/{model}/infer", infer_body(model))
            assert answer.status == 200
    wait_until(
        lambda: (
            batching_inferences(http_call(real.metrics_url, "GET", "").body.decode())
            >= batching_inferences(before[0]) + 1
            and successes(http_call(real.metrics_url, "GET", "").body.decode())["cached"]
            >= successes(before[0])["cached"] + 1
        ),
        SETTLE_TIMEOUT_S,
        "real Triton to count the requests",
    )
    real_text = http_call(real.metrics_url, "GET", "").body.decode()
    sim_text = http_call(sim.metrics_url, "GET", "").body.decode()
    real_families = families(real_text)
    assert "nv_inference_compute_infer_summary_us" in real_families
    assert "nv_cache_hit_summary_per_model" in real_families
    request_summary = real_families["nv_inference_request_summary_us"].series
    assert not any(("model", "cached") in labels for _, labels in request_summary)
    compare_families(real_text, sim_text, baselines=before)


def test_metrics_endpoint_answers_match(pair: Pair) -> None:
    """The metrics port: the same Content-Type, an empty 200 off /metrics, 405 for POST."""
    for path, method in (("/metrics", "GET"), ("/other", "GET"), ("/metrics", "POST")):
        real = http_call(pair.real.metrics_url.removesuffix("/metrics"), method, path)
        sim = http_call(pair.sim.metrics_url.removesuffix("/metrics"), method, path)
        assert (sim.status, sim.headers.get("content-type")) == (
            real.status,
            real.headers.get("content-type"),
        ), (method, path)
        if path != "/metrics" or method != "GET":
            assert sim.body == real.body, (method, path)


# -- repository index, load and unload --------------------------------------------------------------


def test_repository_index_matches(pair: Pair) -> None:
    """POST /v2/repository/index (all and ready only), around an unload and a load."""
    unloaded = {"name": "text", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
    try:
        for stage in ("loaded", "unloaded"):
            for body in ({}, {"ready": True}, None):
                real, sim = pair.both("POST", "/v2/repository/index", body)
                assert (real.status, real.media_type) == (sim.status, sim.media_type) == (200, JSON)
                assert sim.json() == real.json(), (stage, body)
                assert (unloaded in real.json()) == (
                    stage == "unloaded" and body != {"ready": True}
                )
            if stage == "loaded":
                pair.unload("text")
    finally:
        for side in (pair.real.http_url, pair.sim.http_url):
            http_call(side, "POST", "/v2/repository/models/text/load", {})
    real, sim = pair.both("POST", "/v2/repository/index", {})
    assert (
        sim.json()
        == real.json()
        == [{"name": model, "version": "1", "state": "READY"} for model in MODELS]
    )


@pytest.mark.parametrize("mode", ["none", "poll"])
def test_model_control_refusal_matches(
    start_sim: Any, restricted: dict[str, RealTriton], mode: str
) -> None:
    """Outside explicit model control, load and unload are refused with Triton's 503."""
    real = restricted[mode]
    sim = start_sim(models=restricted_model_set(), model_control_mode=mode)
    for action in ("load", "unload"):
        path = f"/v2/repository/models/batching/{action}"
        answers = [http_call(base, "POST", path, {}) for base in (real.http_url, sim.http_url)]
        for answer in answers:
            assert (answer.status, answer.json()) == (
                503,
                {"error": "explicit model load / unload is not allowed if polling is enabled"},
            ), action


def test_grpc_repository_index_matches(pair: Pair) -> None:
    """gRPC RepositoryIndex lists the same models and states."""
    answers = {}
    for side, address in pair.grpc_addresses().items():
        client = grpcclient.InferenceServerClient(address)
        try:
            answers[side] = json_format.MessageToDict(client.get_model_repository_index())
        finally:
            client.close()
    assert answers["sim"] == answers["real"]


POLL_FAILED = '{"error":"failed to load \'%s\', failed to poll from model repository"}'
LOAD_CASES: dict[str, tuple[str, Any, int, str]] = {
    # case: (path, body, status, body recorded from real Triton 2.51)
    "load a loaded model": ("/v2/repository/models/batching/load", {}, 200, ""),
    "load without a body": ("/v2/repository/models/batching/load", None, 200, ""),
    "load an unknown model": ("/v2/repository/models/nope/load", {}, 500, POLL_FAILED % "nope"),
    "load an unknown model with a config": (
        "/v2/repository/models/nope/load",
        {"parameters": {"config": json.dumps({"backend": "python", "max_batch_size": 1})}},
        500,
        POLL_FAILED % "nope",
    ),
    "load a config that does not parse": (
        "/v2/repository/models/batching/load",
        {"parameters": {"config": "{nope"}},
        500,
        POLL_FAILED % "batching",
    ),
    "load a config naming another model": (
        "/v2/repository/models/batching/load",
        {"parameters": {"config": json.dumps({"name": "other", "backend": "python"})}},
        500,
        POLL_FAILED % "batching",
    ),
    "load a config with an unknown field": (
        "/v2/repository/models/batching/load",
        {"parameters": {"config": json.dumps({"backend": "python", "max_batch_sizes": 3})}},
        500,
        POLL_FAILED % "batching",
    ),
    "load a config that fails validation": (
        "/v2/repository/models/batching/load",
        {
            "parameters": {
                "config": json.dumps(
                    {
                        "backend": "python",
                        "max_batch_size": 8,
                        "dynamic_batching": {"preferred_batch_size": [16]},
                        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
                        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
                    }
                )
            }
        },
        500,
        POLL_FAILED % "batching",
    ),
    "load parameters that are not an object": (
        "/v2/repository/models/batching/load",
        {"parameters": [1]},
        500,
        '{"error":"attempt to get members for non-object"}',
    ),
    "load a config that is not a string": (
        "/v2/repository/models/batching/load",
        {"parameters": {"config": 5}},
        500,
        '{"error":"attempt to access JSON non-string as string"}',
    ),
    "load an unknown parameter": (
        "/v2/repository/models/batching/load",
        {"parameters": {"foo": "bar"}},
        500,
        '{"error":"unexpected error on creating Triton parameter"}',
    ),
    "unload an unknown model": ("/v2/repository/models/nope/unload", {}, 200, ""),
    "unload an unknown model without a body": ("/v2/repository/models/nope/unload", None, 200, ""),
    "index with ready not a boolean": (
        "/v2/repository/index",
        {"ready": "yes"},
        500,
        '{"error":"attempt to access JSON non-boolean as boolean"}',
    ),
}


@pytest.mark.parametrize("case", list(LOAD_CASES))
def test_repository_answers_match(pair: Pair, case: str) -> None:
    """Load/unload/index answers match Triton's; a refused load leaves the model as it was."""
    path, body, status, recorded = LOAD_CASES[case]
    before = [answer.json() for answer in pair.both("GET", "/v2/models/batching/config")]
    real, sim = pair.both("POST", path, body)
    after = [answer.json() for answer in pair.both("GET", "/v2/models/batching/config")]
    if after != before:  # a load that took: put the model back for the other tests
        pair.reset("batching")
    assert (real.status, real.body.decode(), real.media_type) == (status, recorded, JSON)
    assert (sim.status, sim.body.decode(), sim.media_type) == (status, recorded, JSON)
    assert after == before


def test_unparsable_repository_bodies_match(pair: Pair) -> None:
    """A load or index body that is not JSON: 500 and Triton's message prefix."""
    for path in ("/v2/repository/index", "/v2/repository/models/batching/load"):
        real, sim = pair.both("POST", path, b"nope")
        prefix = "failed to parse the request JSON buffer: "
        for answer in (real, sim):  # the parser's detail: INTENDED_DIFFERENCES["json-parse-detail"]
            assert answer.status == 500
            assert answer.json()["error"].startswith(prefix), answer


# -- HTTP errors -----------------------------------------------------------------------------------


def _tensor(
    name: str = "INPUT0", datatype: str = "FP32", shape: Any = (1, 16), **extra: Any
) -> dict[str, Any]:
    tensor: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(shape)}
    count = int(np.prod(shape)) if isinstance(shape, tuple) else 0
    tensor["data"] = [0.5] * count
    tensor.update(extra)
    return tensor


def _binary(size: int, sent: int) -> tuple[bytes, dict[str, str]]:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "FP32",
                    "shape": [1, 16],
                    "parameters": {"binary_data_size": size},
                }
            ]
        }
    ).encode()
    return header + b"\0" * sent, {"Inference-Header-Content-Length": str(len(header))}


LABEL = "[request id: <id_unknown>] "
NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to "
    "be prepended to each input shape. If you want to specify the full shape including the "
    "batch dim in your input dims config, try setting max_batch_size to zero. See the model "
    "configuration docs for more info on max_batch_size."
)
INPUT_FIELDS = (
    "Input must set only one of the following fields: 'data', 'binary_data_size' in "
    "'parameters', 'shared_memory_region' in 'parameters'. But "
)
B1 = infer_body("batching")
INFER = "/v2/models/batching/infer"


@dataclass(frozen=True)
class Case:
    method: str
    path: str
    status: int
    error: str
    """The ``error`` text real Triton 2.51 answers with."""
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    media_type: str = JSON


HTTP_ERRORS: dict[str, Case] = {
    "unknown model: infer": Case("POST", "/v2/models/nope/infer", 404, "Request for unknown model: 'nope' is not found", B1, media_type=TEXT),
    "unknown model: metadata": Case("GET", "/v2/models/nope", 404, "Request for unknown model: 'nope' is not found"),
    "unknown model: config": Case("GET", "/v2/models/nope/config", 404, "Request for unknown model: 'nope' is not found"),
    "unknown model: statistics": Case("GET", "/v2/models/nope/stats", 400, "requested model 'nope' is not available"),
    "unknown model: ready": Case("GET", "/v2/models/nope/ready", 400, "Model version not ready", media_type=TEXT),
    "unknown model before a bad body": Case("POST", "/v2/models/nope/infer", 404, "Request for unknown model: 'nope' is not found", b"{nope", media_type=TEXT),
    "unknown version: infer": Case("POST", "/v2/models/batching/versions/7/infer", 404, "Request for unknown model: 'batching' version 7 is not found", B1, media_type=TEXT),
    "unknown version: metadata": Case("GET", "/v2/models/batching/versions/7", 404, "Request for unknown model: 'batching' version 7 is not found"),
    "unknown version: config": Case("GET", "/v2/models/batching/versions/7/config", 404, "Request for unknown model: 'batching' version 7 is not found"),
    "unknown version: statistics": Case("GET", "/v2/models/batching/versions/7/stats", 400, "requested model version is not available for model 'batching'"),
    "unknown version: ready": Case("GET", "/v2/models/batching/versions/7/ready", 400, "Model version not ready", media_type=TEXT),
    "wrong input name": Case("POST", INFER, 400, "unexpected inference input 'X' for model 'batching'", {"inputs": [_tensor("X")]}),
    "wrong shape": Case("POST", INFER, 400, f"{LABEL}unexpected shape for input 'INPUT0' for model 'batching'. Expected [-1,16], got [1,8]. {NOTE}", {"inputs": [_tensor(shape=(1, 8))]}),
    "wrong shape, no batching": Case("POST", "/v2/models/needs_two/infer", 400, f"{LABEL}unexpected shape for input 'INPUT0' for model 'needs_two'. Expected [4], got [1,4]. ", {"inputs": [_tensor(shape=(1, 4))]}),
    "wrong shape, request id named": Case("POST", INFER, 400, f"[request id: abc] unexpected shape for input 'INPUT0' for model 'batching'. Expected [-1,16], got [1,8]. {NOTE}", {"id": "abc", "inputs": [_tensor(shape=(1, 8))]}),
    "batch too big": Case("POST", INFER, 400, f"{LABEL}inference request batch-size must be <= 8 for 'batching'", {"inputs": [_tensor(shape=(9, 16))]}),
    "wrong datatype": Case("POST", INFER, 400, f"{LABEL}inference input 'INPUT0' data-type is 'INT32', but model 'batching' expects 'FP32'", {"inputs": [{**_tensor(datatype="INT32"), "data": [1] * 16}]}),
    "unknown datatype": Case("POST", INFER, 400, "invalid datatype for input INPUT0", {"inputs": [_tensor(datatype="FOO")]}),
    "missing input": Case("POST", INFER, 400, f"{LABEL}expected 1 inputs but got 0 inputs for model 'batching'. Got input(s) [], but missing required input(s) ['INPUT0']. Please provide all required input(s).", {"inputs": []}),
    "too few elements": Case("POST", INFER, 500, "Unable to parse 'data': Shape does not match true shape of 'data' field", {"inputs": [{**_tensor(), "data": [0.5] * 8}]}),
    "wrong JSON type in data": Case("POST", INFER, 500, "Unable to parse 'data': attempt to access JSON non-number as double", {"inputs": [{**_tensor(), "data": [True] * 16}]}),
    "float data for an integer input": Case("POST", INFER, 500, "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer", {"inputs": [_tensor(datatype="INT32")]}),
    "no data": Case("POST", INFER, 400, INPUT_FIELDS + "no field is set", {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16]}]}),
    "data and binary data": Case("POST", INFER, 400, INPUT_FIELDS + "set 'data' 'binary_data_size'", {"inputs": [_tensor(parameters={"binary_data_size": 64})]}),
    "unknown shared memory region": Case("POST", INFER, 404, "Unable to find shared memory region: 'r1'", {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "parameters": {"shared_memory_region": "r1", "shared_memory_byte_size": 64}}]}),
    "binary data cut short": Case("POST", INFER, 400, "unexpected size for input 'INPUT0', expecting 54 additional bytes for model 'batching'", *_binary(64, 10)),
    "binary data of the wrong size": Case("POST", INFER, 400, f"{LABEL}input byte size mismatch for input 'INPUT0' for model 'batching'. Expected 64, got 10", *_binary(10, 10)),
    "batch of zero rows": Case("POST", INFER, 400, f"{LABEL}input byte size mismatch for input 'INPUT0' for model 'batching'. Expected 64, got 0", {"inputs": [_tensor(shape=(0, 16))]}),
    "unknown output": Case("POST", INFER, 400, "unexpected inference output 'NOPE' for model 'batching'", {**B1, "outputs": [{"name": "NOPE"}]}),
    "unknown output before a wrong shape": Case("POST", INFER, 400, "unexpected inference output 'NOPE' for model 'batching'", {"inputs": [_tensor(shape=(1, 8))], "outputs": [{"name": "NOPE"}]}),
    "no inputs member": Case("POST", INFER, 500, "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'", {}),
    "body not an object": Case("POST", INFER, 500, "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'", b"[1, 2]"),
    "inputs not an array": Case("POST", INFER, 500, "Unable to parse 'inputs': attempt to access JSON non-array as array", {"inputs": 5}),
    "input without a name": Case("POST", INFER, 500, "Unable to parse 'name': attempt to access non-existing object member 'name'", {"inputs": [{"datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16}]}),
    "shape not an array": Case("POST", INFER, 500, "Unable to parse 'shape': attempt to access JSON non-array as array", {"inputs": [{**_tensor(), "shape": "1x16"}]}),
    "negative dimension": Case("POST", INFER, 500, "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer", {"inputs": [{**_tensor(), "shape": [-1, 16]}]}),
    "id not a string": Case("POST", INFER, 500, "Unable to parse 'id': attempt to access JSON non-string as string", {**B1, "id": 5}),
    "parameters not an object": Case("POST", INFER, 500, "failed to get request params.: attempt to get members for non-object", {**B1, "parameters": [1]}),
    "binary_data_output not a boolean": Case("POST", INFER, 500, "Unable to parse 'binary_data_output': attempt to access JSON non-boolean as boolean", {**B1, "parameters": {"binary_data_output": 5}}),
    "output without a name": Case("POST", INFER, 500, "Unable to parse 'name': attempt to access non-existing object member 'name'", {**B1, "outputs": [5]}),
    "unknown path": Case("GET", "/v2/nope", 404, "Not Found", media_type=TEXT),
    "wrong method on infer": Case("GET", INFER, 405, "Method Not Allowed", media_type=TEXT),
    "wrong method on server metadata": Case("POST", "/v2", 405, "Method Not Allowed", {}),
}  # fmt: skip


@pytest.mark.usefixtures("traffic")
@pytest.mark.parametrize("case", list(HTTP_ERRORS))
def test_http_errors_match(pair: Pair, case: str) -> None:
    """Each mistake gets real Triton's status, content type and exact error body."""
    spec = HTTP_ERRORS[case]
    real, sim = pair.both(spec.method, spec.path, spec.body, spec.headers)
    recorded = (spec.status, spec.media_type, {"error": spec.error})
    assert (real.status, real.media_type, real.json()) == recorded
    assert (sim.status, sim.media_type, sim.json()) == recorded


def test_unparsable_infer_body_matches(pair: Pair) -> None:
    """An infer body that is not JSON: 500 and Triton's prefix on both."""
    real, sim = pair.both("POST", INFER, b"{nope")
    for answer in (real, sim):  # the parser's detail: INTENDED_DIFFERENCES["json-parse-detail"]
        assert answer.status == 500 and answer.media_type == JSON
        assert answer.json()["error"].startswith("failed to parse the request JSON buffer: ")


UNLOADED_ERRORS: dict[str, Case] = {
    "infer": Case("POST", "/v2/models/needs_two/infer", 404, "Request for unknown model: 'needs_two' has no available versions", infer_body("needs_two"), media_type=TEXT),
    "metadata": Case("GET", "/v2/models/needs_two", 404, "Request for unknown model: 'needs_two' has no available versions"),
    "config": Case("GET", "/v2/models/needs_two/config", 404, "Request for unknown model: 'needs_two' has no available versions"),
    "statistics": Case("GET", "/v2/models/needs_two/stats", 400, "requested model 'needs_two' is not available"),
    "ready": Case("GET", "/v2/models/needs_two/ready", 400, "Model version not ready", media_type=TEXT),
}  # fmt: skip
GRPC_UNLOADED = {
    "infer": (grpclib.StatusCode.NOT_FOUND, "Request for unknown model: 'needs_two' has no available versions"),
    "metadata": (grpclib.StatusCode.NOT_FOUND, "Request for unknown model: 'needs_two' has no available versions"),
    "config": (grpclib.StatusCode.NOT_FOUND, "Request for unknown model: 'needs_two' has no available versions"),
    "statistics": (grpclib.StatusCode.INVALID_ARGUMENT, "requested model 'needs_two' is not available"),
}  # fmt: skip


def test_unloaded_model_errors_match(pair: Pair) -> None:
    """An unloaded model: every HTTP endpoint and gRPC call answers as real Triton's."""
    mismatches = []
    try:
        pair.unload("needs_two")
        for name, spec in UNLOADED_ERRORS.items():
            real, sim = pair.both(spec.method, spec.path, spec.body, spec.headers)
            recorded = (spec.status, spec.media_type, {"error": spec.error})
            for side, answer in (("real", real), ("sim", sim)):
                if (answer.status, answer.media_type, answer.json()) != recorded:
                    mismatches.append((name, side, answer))
        for side, address in pair.grpc_addresses().items():
            client = grpcclient.InferenceServerClient(address)
            try:
                assert client.is_model_ready("needs_two") is False, side
                for name, recorded in GRPC_UNLOADED.items():
                    if _grpc_error(client, name) != recorded:
                        mismatches.append((name, side, _grpc_error(client, name)))
            finally:
                client.close()
    finally:
        for side in (pair.real.http_url, pair.sim.http_url):
            http_call(side, "POST", "/v2/repository/models/needs_two/load", {})
    assert mismatches == []


def _grpc_error(client: grpcclient.InferenceServerClient, call: str) -> tuple[Any, str] | None:
    tensor = grpcclient.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(np.full(4, 0.25, dtype=np.float32))
    calls = {
        "infer": lambda: client.infer("needs_two", [tensor]),
        "metadata": lambda: client.get_model_metadata("needs_two"),
        "config": lambda: client.get_model_config("needs_two"),
        "statistics": lambda: client.get_inference_statistics("needs_two"),
    }
    try:
        calls[call]()
    except InferenceServerException as error:
        return _grpc_code(error), error.message()
    return None


def _grpc_code(error: InferenceServerException) -> grpclib.StatusCode:
    return next(code for code in grpclib.StatusCode if str(code) == error.status())


# -- compression ----------------------------------------------------------------------------------

ENCODINGS: dict[str, str | None] = {
    # Accept-Encoding → Content-Encoding real Triton 2.51 answers an infer with
    "gzip": "gzip",
    "deflate": "deflate",
    "gzip, deflate": "gzip",
    "deflate, gzip": "deflate",
    " gzip": "gzip",
    "gzip;q=0.5, deflate": "deflate",
    "deflate;q=0.9, gzip;q=0.9": "deflate",
    "gzip;q=abc, deflate;q=0.1": "deflate",
    "br, gzip;q=0.5": "gzip",
    "gzip, *;q=2": "gzip",
    "gzip;q=0": None,
    "identity": None,
    "br": None,
    "*": None,
    "GZIP": None,
    "x-gzip": None,
}


def inflate(answer: Answer) -> bytes:
    encoding = answer.headers.get("content-encoding")
    if encoding == "gzip":
        return gzip.decompress(answer.body)
    if encoding == "deflate":
        return zlib.decompress(answer.body)
    assert encoding is None, encoding
    return answer.body


@pytest.mark.parametrize("accept", list(ENCODINGS))
def test_infer_compression_matches(pair: Pair, accept: str) -> None:
    """Infer answers are compressed as Triton's for each Accept-Encoding and inflate alike."""
    real, sim = pair.both("POST", INFER, B1, {"Accept-Encoding": accept})
    assert real.headers.get("content-encoding") == ENCODINGS[accept]
    assert sim.headers.get("content-encoding") == ENCODINGS[accept]
    assert json.loads(inflate(sim)) == json.loads(inflate(real))


def test_binary_infer_compression_matches(pair: Pair) -> None:
    """Binary outputs under gzip: same header length (uncompressed JSON) and inflated bytes."""
    body = {**B1, "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}
    real, sim = pair.both("POST", INFER, body, {"Accept-Encoding": "gzip"})
    for header in ("content-type", "content-encoding", "inference-header-content-length"):
        assert sim.headers.get(header) == real.headers.get(header), header
    assert inflate(sim) == inflate(real)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v2/models/batching", None),
        ("GET", "/v2/models/batching/config", None),
        ("GET", "/v2/models/batching/stats", None),
        ("POST", "/v2/repository/index", {}),
        ("POST", "/v2/models/nope/infer", B1),
        ("POST", INFER, {"inputs": []}),
    ],
)
def test_only_successful_infers_are_compressed(
    pair: Pair, method: str, path: str, body: Any
) -> None:
    """Metadata, config, statistics, index and infer errors go out plain under gzip."""
    real, sim = pair.both(method, path, body, {"Accept-Encoding": "gzip"})
    assert real.headers.get("content-encoding") is None
    assert sim.headers.get("content-encoding") is None
    assert sim.status == real.status


# -- gRPC errors -------------------------------------------------------------------------------------

NOT_FOUND, INVALID, INTERNAL = (
    grpclib.StatusCode.NOT_FOUND,
    grpclib.StatusCode.INVALID_ARGUMENT,
    grpclib.StatusCode.INTERNAL,
)
Tensor = service_pb2.ModelInferRequest.InferInputTensor


def _raw(model: str = "batching", name: str = "INPUT0", datatype: str = "FP32",
         shape: tuple[int, ...] = (1, 16), size: int = 64, **fields: Any) -> Any:  # fmt: skip
    return service_pb2.ModelInferRequest(
        model_name=model,
        inputs=[Tensor(name=name, datatype=datatype, shape=list(shape))],
        raw_input_contents=[b"\0" * size] if size >= 0 else [],
        **fields,
    )


GRPC_INFER_ERRORS: dict[str, tuple[Any, grpclib.StatusCode, str]] = {
    "unknown model": (_raw("nope"), NOT_FOUND, "Request for unknown model: 'nope' is not found"),
    "unknown version": (_raw(model_version="7"), NOT_FOUND, "Request for unknown model: 'batching' version 7 is not found"),
    "wrong input name": (_raw(name="X"), INVALID, "unexpected inference input 'X' for model 'batching'"),
    "wrong shape": (_raw(shape=(1, 8), size=32), INVALID, f"{LABEL}unexpected shape for input 'INPUT0' for model 'batching'. Expected [-1,16], got [1,8]. {NOTE}"),
    "wrong shape, request id named": (_raw(shape=(1, 8), size=32, id="r1"), INVALID, f"[request id: r1] unexpected shape for input 'INPUT0' for model 'batching'. Expected [-1,16], got [1,8]. {NOTE}"),
    "wrong shape, no batching": (_raw("needs_two", shape=(1, 4), size=16), INVALID, f"{LABEL}unexpected shape for input 'INPUT0' for model 'needs_two'. Expected [4], got [1,4]. "),
    "batch too big": (_raw(shape=(9, 16), size=576), INVALID, f"{LABEL}inference request batch-size must be <= 8 for 'batching'"),
    "wrong datatype": (_raw(datatype="INT32"), INVALID, f"{LABEL}inference input 'INPUT0' data-type is 'INT32', but model 'batching' expects 'FP32'"),
    "unknown datatype": (_raw(datatype="FOO"), INVALID, f"{LABEL}inference input 'INPUT0' data-type is '<invalid>', but model 'batching' expects 'FP32'"),
    "wrong byte size": (_raw(size=10), INVALID, f"{LABEL}input byte size mismatch for input 'INPUT0' for model 'batching'. Expected 64, got 10"),
    "no data": (_raw(size=-1), INVALID, "unable to find data for input tensor 'INPUT0' for model 'batching' in request."),
    "missing input": (service_pb2.ModelInferRequest(model_name="batching"), INVALID, f"{LABEL}expected 1 inputs but got 0 inputs for model 'batching'. Got input(s) [], but missing required input(s) ['INPUT0']. Please provide all required input(s)."),
    "unknown output": (_raw(outputs=[service_pb2.ModelInferRequest.InferRequestedOutputTensor(name="NOPE")]), INVALID, "unexpected inference output 'NOPE' for model 'batching'"),
}  # fmt: skip
Parameter = service_pb2.InferParameter
GRPC_INFER_ERRORS |= {
    f"sequence: {case}": (
        _raw(
            "seq",
            shape=(rows, 16),
            size=64 * rows,
            parameters={
                key: Parameter(bool_param=value)
                if isinstance(value, bool)
                else Parameter(int64_param=value)
                for key, value in parameters.items()
            },
        ),
        INVALID,
        error,
    )
    for case, (parameters, rows, error) in SEQUENCE_REFUSALS.items()
}
GRPC_INFER_ERRORS |= {
    "sequence: an unsigned id": (
        _raw("seq", parameters={"sequence_id": Parameter(uint64_param=5)}),
        INVALID,
        "invalid value type for 'sequence_id' parameter, expected int64_param or string_param.",
    ),
    "sequence: a flag that is no bool": (
        _raw(
            "seq",
            parameters={
                "sequence_id": Parameter(int64_param=5),
                "sequence_start": Parameter(int64_param=1),
            },
        ),
        INVALID,
        "invalid value type for 'sequence_start' parameter, expected bool_param.",
    ),
}


@pytest.fixture(scope="module")
def stubs(pair: Pair) -> Iterator[dict[str, Any]]:
    """Raw gRPC stubs of both servers (requests tritonclient would not build)."""
    channels = {
        side: grpclib.insecure_channel(address) for side, address in pair.grpc_addresses().items()
    }
    yield {
        side: service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for side, channel in channels.items()
    }
    for channel in channels.values():
        channel.close()


@pytest.mark.parametrize("case", list(GRPC_INFER_ERRORS))
def test_grpc_infer_errors_match(stubs: dict[str, Any], case: str) -> None:
    """ModelInfer mistakes: real Triton's gRPC status code and exact message on both."""
    request, code, message = GRPC_INFER_ERRORS[case]
    for side, stub in stubs.items():
        with pytest.raises(grpclib.RpcError) as caught:
            stub.ModelInfer(request, timeout=30)
        assert (caught.value.code(), caught.value.details()) == (code, message), side


def test_grpc_raw_contents_beyond_the_inputs_are_ignored(stubs: dict[str, Any]) -> None:
    """More raw_input_contents than inputs is accepted (Triton reads one per input)."""
    request = _raw()
    request.raw_input_contents.append(b"\0" * 64)
    for side, stub in stubs.items():
        reply = stub.ModelInfer(request, timeout=30)
        assert (reply.model_name, len(reply.raw_output_contents)) == ("batching", 1), side


GRPC_CALL_ERRORS: dict[str, tuple[str, tuple[Any, ...], dict[str, Any], grpclib.StatusCode | None, str]] = {
    "metadata of an unknown model": ("get_model_metadata", ("nope",), {}, NOT_FOUND, "Request for unknown model: 'nope' is not found"),
    "config of an unknown model": ("get_model_config", ("nope",), {}, NOT_FOUND, "Request for unknown model: 'nope' is not found"),
    "statistics of an unknown model": ("get_inference_statistics", ("nope",), {}, INVALID, "requested model 'nope' is not available"),
    "metadata of an unknown version": ("get_model_metadata", ("batching", "7"), {}, NOT_FOUND, "Request for unknown model: 'batching' version 7 is not found"),
    "config of an unknown version": ("get_model_config", ("batching", "7"), {}, NOT_FOUND, "Request for unknown model: 'batching' version 7 is not found"),
    "statistics of an unknown version": ("get_inference_statistics", ("batching", "7"), {}, INVALID, "requested model version is not available for model 'batching'"),
    "load an unknown model": ("load_model", ("nope",), {}, INTERNAL, "failed to load 'nope', failed to poll from model repository"),
    "load a config that does not parse": ("load_model", ("batching",), {"config": "{nope"}, INTERNAL, "failed to load 'batching', failed to poll from model repository"),
    "unload an unknown model": ("unload_model", ("nope",), {}, None, ""),
}  # fmt: skip


@pytest.mark.parametrize("case", list(GRPC_CALL_ERRORS))
def test_grpc_call_errors_match(pair: Pair, case: str) -> None:
    """Metadata/config/statistics/repository mistakes over gRPC: same status code and message."""
    method, args, kwargs, code, message = GRPC_CALL_ERRORS[case]
    for side, address in pair.grpc_addresses().items():
        client = grpcclient.InferenceServerClient(address)
        try:
            assert client.is_model_ready("nope") is False
            assert client.is_model_ready("batching", "7") is False
            try:
                getattr(client, method)(*args, **kwargs)
                outcome: tuple[Any, str] = (None, "")
            except InferenceServerException as error:
                outcome = (_grpc_code(error), error.message())
        finally:
            client.close()
        assert outcome == (code, message), side


# -- ensembles, stateful and cached models ------------------------------------------------------


def _settled_stats(pair: Pair, models: tuple[str, ...], successes_before: dict[str, int]) -> None:
    """Waits until real Triton has counted one more success on each of ``models``."""
    wait_until(
        lambda: all(
            _model_stats(pair.real.http_url, m)["inference_stats"]["success"]["count"]
            > successes_before[m]
            for m in models
        ),
        SETTLE_TIMEOUT_S,
        "real Triton to count the requests",
    )


def _stats_of(base: str, models: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    return {model: _model_stats(base, model) for model in models}


def _stage_ns(after: dict[str, Any], before: dict[str, Any], stage: str) -> int:
    ns: int = after["inference_stats"][stage]["ns"] - before["inference_stats"][stage]["ns"]
    return ns


def test_ensemble_statistics_match(pair: Pair) -> None:
    """One ensemble request: the ensemble and each step count one request on both
    servers; the ensemble's compute is the exact sum of its steps' and its queue holds
    none of the steps' (core's batcher waits 20 ms)."""
    steps = ("prep", "core", "post")
    models = ("pipeline", *steps)
    sides = {"real": pair.real.http_url, "sim": pair.sim.http_url}
    before = {side: _stats_of(base, models) for side, base in sides.items()}
    real, sim = pair.both("POST", "/v2/models/pipeline/infer", infer_body("pipeline"))
    assert (real.status, sim.status) == (200, 200)
    assert real.json() == sim.json()
    counted = {m: before["real"][m]["inference_stats"]["success"]["count"] for m in models}
    _settled_stats(pair, models, counted)
    after = {side: _stats_of(base, models) for side, base in sides.items()}
    increases = {
        side: {m: _increase(after[side][m], before[side][m]) for m in models} for side in sides
    }
    assert increases["sim"] == increases["real"]
    for side in sides:
        ensemble = increases[side]["pipeline"]
        assert (ensemble["execution_count"], ensemble["counts"]["success"]) == (1, 1), side
        for stage in ("compute_input", "compute_infer", "compute_output"):
            total = _stage_ns(after[side]["pipeline"], before[side]["pipeline"], stage)
            parts = [_stage_ns(after[side][m], before[side][m], stage) for m in steps]
            assert total == sum(parts), (side, stage)
        queued = _stage_ns(after[side]["pipeline"], before[side]["pipeline"], "queue")
        assert queued < _stage_ns(after[side]["core"], before[side]["core"], "queue"), side


def test_cache_hit_counts_match(pair: Pair) -> None:
    """A new request and its repeat to the cached model: one miss that executes, one hit
    that does not; both are successes, neither is pending, on both servers."""
    sides = {"real": pair.real.http_url, "sim": pair.sim.http_url}
    before = {side: _model_stats(base, "cached") for side, base in sides.items()}
    body = infer_body("cached", value=4242.0)  # bytes no other request sends
    for _ in range(2):
        real, sim = pair.both("POST", "/v2/models/cached/infer", body)
        assert (real.status, sim.status) == (200, 200)
        assert real.json() == sim.json()
    wait_until(
        lambda: (
            _model_stats(pair.real.http_url, "cached")["inference_stats"]["cache_miss"]["count"]
            > before["real"]["inference_stats"]["cache_miss"]["count"]
        ),
        SETTLE_TIMEOUT_S,
        "real Triton to count the miss",
    )
    increases = {
        side: _increase(_model_stats(base, "cached"), before[side]) for side, base in sides.items()
    }
    assert increases["sim"] == increases["real"]
    counts = increases["real"]["counts"]
    assert (counts["success"], counts["queue"], counts["cache_hit"], counts["cache_miss"]) == (
        2,
        2,
        1,
        1,
    )
    assert (counts["compute_infer"], increases["real"]["execution_count"]) == (1, 1)
    assert increases["real"]["inference_count"] == 1  # a hit is no inference


def test_grpc_ensemble_reply_matches(stubs: dict[str, Any]) -> None:
    """Over gRPC an ensemble's reply carries the request's sequence parameters, as over HTTP."""
    request = _raw(
        "pipeline",
        parameters={
            "sequence_id": Parameter(int64_param=7),
            "sequence_start": Parameter(bool_param=True),
        },
    )
    replies = {side: stub.ModelInfer(request, timeout=30) for side, stub in stubs.items()}
    documents = {side: json_format.MessageToDict(reply) for side, reply in replies.items()}
    assert documents["sim"] == documents["real"]
    assert documents["real"]["parameters"] == {
        "sequence_id": {"int64Param": "7"},
        "sequence_start": {"boolParam": True},
        "sequence_end": {"boolParam": False},
    }


@pytest.mark.parametrize("model", ["pipeline", "seq"])
def test_kind_config_loads_back_match(pair: Pair, model: str) -> None:
    """An ensemble's and a stateful model's printed config loads back (repository load
    with it as the override) and prints the same on both servers (an unchanged config:
    nothing to put back)."""
    original = pair.both("GET", f"/v2/models/{model}/config")[0].json()
    answers = _load(pair, model, original)
    assert [(a.status, a.body) for a in answers] == [(200, b"")] * 2, answers
    real, sim = pair.both("GET", f"/v2/models/{model}/config")
    assert sim.json() == real.json() == original
