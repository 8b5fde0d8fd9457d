"""The scale benchmark's many-model server (benchmarks/many_models.py) read by the
daemon's own parsers and by prometheus_client, its requests built and its answers
decoded by the canary's KServe code, and the pure helpers of benchmarks/scale.py. The
socket layer is checked on an in-process loopback server; no benchmark runs here."""

from __future__ import annotations

import http.client
import json
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from many_models_support import serving

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from many_models import FAMILIES, KINDS, ManyModels, Request
from scale import DEFAULT_CAP, canary_successes, daemon_config, series_count

from tritonwatch.config.loader import parse_config
from tritonwatch.kserve.binary_tensors import binary_request_body
from tritonwatch.kserve.infer_response import decode_http_infer_response
from tritonwatch.kserve.payload import Tensor, input_specs
from tritonwatch.records.observations import ModelKey
from tritonwatch.runtime.model_discovery import parse_index, ready_names
from tritonwatch.scrape.triton_config import parse_model_config
from tritonwatch.scrape.triton_stats import parse_all_model_statistics
from tritonwatch.scrape.triton_text import parse_triton_metrics


def _rows(count: int, first: float = 0.0) -> Tensor:
    values = [first + i for i in range(count * 16)]
    return Tensor("INPUT0", "FP32", (count, 16), struct.pack(f"<{len(values)}f", *values))


def _binary_infer(
    models: ManyModels, model: str, tensor: Tensor
) -> tuple[int, bytes, dict[str, str]]:
    body, headers = binary_request_body([tensor])
    lowered = {name.lower(): value for name, value in headers.items()}
    answer = models.route(Request("POST", f"/v2/models/{model}/infer", lowered, body))
    return answer.status, answer.body, answer.headers


def test_binary_infer_echoes_the_input_as_the_output_the_metadata_names() -> None:
    models = ManyModels(3)
    tensor = _rows(2, first=0.5)
    status, body, headers = _binary_infer(models, "m0002", tensor)
    assert status == 200
    decoded = decode_http_infer_response(body, headers["Inference-Header-Content-Length"])
    metadata = json.loads(models.route(Request("GET", "/v2/models/m0002")).body)
    assert [entry["name"] for entry in metadata["outputs"]] == list(decoded.tensors)
    output = decoded.tensors["OUTPUT0"]
    assert (output.datatype, output.shape, output.raw) == ("FP32", (2, 16), tensor.raw)


def test_json_infer_answers_json_tensors() -> None:
    models = ManyModels(1)
    request = {
        "inputs": [
            {
                "name": "INPUT0",
                "shape": [1, 16],
                "datatype": "FP32",
                "data": [[float(i) for i in range(16)]],
            }
        ]
    }
    answer = models.route(
        Request("POST", "/v2/models/m0000/infer", {}, json.dumps(request).encode())
    )
    assert answer.status == 200
    decoded = decode_http_infer_response(answer.body)
    assert decoded.tensors["OUTPUT0"].values() == [float(i) for i in range(16)]


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        (Tensor("INPUT0", "FP32", (9, 16), b"\0" * 9 * 64), "unexpected shape"),
        (Tensor("INPUT1", "FP32", (1, 16), b"\0" * 64), "unexpected input"),
        (Tensor("INPUT0", "FP32", (1, 16), b"\0" * 60), "60 bytes"),
    ],
)
def test_a_request_the_model_cannot_take_is_refused_and_not_counted(
    tensor: Tensor, message: str
) -> None:
    models = ManyModels(1)
    status, body, _ = _binary_infer(models, "m0000", tensor)
    assert status == 400
    assert message in json.loads(body)["error"]
    assert models.counters["m0000"].success == 0


def test_metrics_page_reads_the_same_with_prometheus_client_and_the_daemons_parser() -> None:
    models = ManyModels(4)
    for _ in range(3):
        _binary_infer(models, "m0001", _rows(2))
    page = models.metrics_page()
    families = {family.name: family for family in text_string_to_metric_families(page)}
    # prometheus_client drops a counter's _total suffix from the family name only
    assert {name.removesuffix("_total") for name, *_ in FAMILIES} <= set(families)
    success = {s.labels["model"]: s.value for s in families["nv_inference_request_success"].samples}
    assert success == {"m0000": 0, "m0001": 3, "m0002": 0, "m0003": 0}
    failures = families["nv_inference_request_failure"].samples
    assert len(failures) == 4 * 4  # one per reason per model, as 24.07+ print them
    scrape = parse_triton_metrics(page, at=0.0)
    assert scrape.bad_lines == 0
    assert scrape.samples == sum(len(f.samples) for f in families.values())
    ours = scrape.models[ModelKey("m0001", "1")]
    counters = models.counters["m0001"]
    assert ours.counters["nv_inference_request_success"] == 3
    assert ours.counters["nv_inference_count"] == 6
    assert ours.counters["nv_inference_exec_count"] == 3
    assert ours.counters["nv_inference_request_duration_us"] == counters.request_ns // 1000
    assert ours.counters["nv_inference_compute_infer_duration_us"] == counters.infer_ns // 1000
    assert ours.gauges["nv_inference_pending_request_count"] == 0


def test_statistics_read_by_the_scrapers_parser_grow_with_each_inference() -> None:
    models = ManyModels(1000)
    _binary_infer(models, "m0999", _rows(1))
    _binary_infer(models, "m0999", _rows(3))
    every = models.route(Request("GET", "/v2/models/stats"))
    keys = [ModelKey(name, "") for name in models.names]
    parsed, malformed = parse_all_model_statistics(json.loads(every.body), keys, at=1.0)
    assert malformed == {}
    assert len(parsed) == 1000
    stats = parsed["m0999"]
    assert (stats.success_count, stats.inference_count, stats.execution_count) == (2, 4, 2)
    assert dict(stats.batch_executions) == {1: 1, 3: 1}
    assert parsed["m0000"].success_count == 0
    one = models.route(Request("GET", "/v2/models/m0999/versions/1/stats"))
    alone, _ = parse_all_model_statistics(json.loads(one.body), [ModelKey("m0999", "1")], at=2.0)
    assert alone["m0999"].success_count == 2


def test_metadata_config_and_index_are_what_the_canary_and_discovery_read() -> None:
    models = ManyModels(12)
    metadata = json.loads(models.route(Request("GET", "/v2/models/m0011")).body)
    config = json.loads(models.route(Request("GET", "/v2/models/m0011/config")).body)
    specs = input_specs("m0011", metadata, config)
    assert [(s.name, s.datatype, s.shape) for s in specs] == [("INPUT0", "FP32", (1, 16))]
    snapshot = parse_model_config(config, "m0011", at=0.0)
    assert snapshot.max_batch_size == 8
    assert config["instance_group"][0]["name"] == "m0011_0"
    index = models.route(Request("POST", "/v2/repository/index", {}, b'{"ready":true}'))
    assert ready_names(parse_index(json.loads(index.body))) == models.names


def test_every_call_is_counted_by_kind_and_unknown_ones_are_refused() -> None:
    models = ManyModels(2)
    calls = [
        ("GET", "/v2"),
        ("GET", "/v2/health/ready"),
        ("GET", "/v2/models/m0000/ready"),
        ("GET", "/v2/models/m0000"),
        ("GET", "/v2/models/m0000/config"),
        ("GET", "/v2/models/stats"),
        ("POST", "/v2/repository/index"),
        ("GET", "/v2/models/nope/config"),
        ("GET", "/v2/repository/models"),
    ]
    answers = [models.route(Request(method, path)) for method, path in calls]
    assert [a.status for a in answers] == [200, 200, 200, 200, 200, 200, 200, 400, 404]
    assert json.loads(answers[7].body) == {
        "error": "Request for unknown model: 'nope' is not found"
    }
    assert "binary_tensor_data" in json.loads(answers[0].body)["extensions"]
    assert dict(models.calls) == {
        **dict.fromkeys(KINDS, 0),
        "server": 1,
        "health": 1,
        "ready": 1,
        "metadata": 1,
        "config": 2,
        "stats": 1,
        "index": 1,
        "other": 1,
    }


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ManyModels, dict[str, int]]]:
    """The server on loopback ports in this process, on a thread of its own."""
    models = ManyModels(5)
    with serving(models, tmp_path) as ports:
        yield models, ports


def test_keep_alive_connection_serves_the_api_and_the_metrics_port_its_page(
    served: tuple[ManyModels, dict[str, int]],
) -> None:
    models, ports = served
    api = http.client.HTTPConnection("127.0.0.1", ports["http"], timeout=10)
    body, headers = binary_request_body([_rows(1)])
    for _ in range(3):  # one connection, three requests
        api.request("POST", "/v2/models/m0003/infer", body, headers)
        answer = api.getresponse()
        payload = answer.read()
        assert answer.status == 200
        length = answer.getheader("Inference-Header-Content-Length")
        assert decode_http_infer_response(payload, length).tensors["OUTPUT0"].raw == _rows(1).raw
    api.request("GET", "/bench/counts")
    counted = json.loads(api.getresponse().read())
    assert counted["infer"] == 3
    page = http.client.HTTPConnection("127.0.0.1", ports["metrics"], timeout=10)
    page.request("GET", "/metrics")
    text = page.getresponse().read().decode()
    assert 'nv_inference_request_success{model="m0003",version="1"} 3\n' in text
    assert models.calls["metrics"] == 1
    api.close()
    page.close()


def test_scale_reads_the_daemons_successes_and_series() -> None:
    page = (
        "# HELP tritonwatch_canary_requests_total Canary requests sent, by how they ended.\n"
        "# TYPE tritonwatch_canary_requests_total counter\n"
        'tritonwatch_canary_requests_total{target="many",model="m0000",protocol="http",'
        'outcome="success"} 3.0\n'
        'tritonwatch_canary_requests_total{target="many",model="m0001",protocol="http",'
        'outcome="timeout"} 1.0\n'
        'tritonwatch_canary_requests_total{target="many",model="m0001",protocol="http",'
        'outcome="success"} 2.0\n'
        "\n"
    )
    assert canary_successes(page) == {"m0000": 3.0, "m0001": 2.0}
    assert series_count(page) == 3


@pytest.mark.parametrize("count", [20, 1000])
def test_scale_config_discovers_every_model_and_keeps_the_other_defaults(count: int) -> None:
    config = parse_config(
        daemon_config("http://127.0.0.1:1", "http://127.0.0.1:2/metrics", count), "<scale>"
    )
    (target,) = config.targets
    assert target.selection is not None  # discovering: no models listed
    assert config.discovery.max_models_per_target == max(count, DEFAULT_CAP)
    assert config.scrape.interval == 15.0
    assert config.canary.rate == 1.0
