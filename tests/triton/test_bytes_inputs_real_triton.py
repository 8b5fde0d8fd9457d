"""BYTES inputs filled like perf_analyzer, against the real server's ``text`` echo model.

``text`` (BYTES TEXT [1] → TEXT_OUT, max_batch_size 8) stands for every tokenizer and
TRT-LLM/vLLM ensemble: until the canary, ``sweep`` and ``tune`` synthesised strings, each
refused such a model ("a BYTES input needs sample data").
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time
from http.client import HTTPResponse
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from canary_support import RecordingCanary, RecordingClient
from tritonclient.grpc import service_pb2

from real_triton import RealTriton
from support import TRITONWATCH
from tritonwatch.config import parse_config
from tritonwatch.kserve.payload import STRING_CHARACTERS, Tensor
from tritonwatch.probe.canary.clients import client_for
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.plans import canary_plans
from tritonwatch.records.observations import Outcome
from tritonwatch.records.sweep_records import SweepSettings
from tritonwatch.state.canary_board import CanaryBoard
from tritonwatch.sweep.load_sweep import prepare_tensors
from tritonwatch.sweep.spec import grpc_load_spec, http_load_spec

pytestmark = pytest.mark.real

WAIT_SECONDS = 20.0
PROMPT = "What is Triton? ¿Qué es?"


def _canary_exchanges(
    url: str, canary: str, count: int = 5
) -> tuple[dict[str, int], list[tuple[list[Tensor], Any]]]:
    """Runs the configured canary of ``text`` from an engine, as the daemon's, until
    ``count`` answers came back; its outcomes, and each answer decoded with the tensors
    of its request."""
    config = parse_config(
        f"targets: [{{name: real, url: '{url}', models: [{{name: text, canary: {canary}}}]}}]",
        "bytes.yaml",
    )
    (plan,) = canary_plans(config)
    stats = CanaryBoard()
    stats.declare([plan.key])
    engine = CanaryEngine()

    async def run() -> list[tuple[list[Tensor], Any]]:
        # As the runner makes it: a grpc:// url without http_url asks metadata over gRPC.
        inner = client_for(plan.protocol, plan.http_url, plan.grpc_url, grpc_only=plan.grpc_only)
        client = RecordingClient(inner)
        canary = RecordingCanary(plan, client, stats, engine=engine)
        task = asyncio.create_task(canary.run())
        try:
            deadline = time.monotonic() + WAIT_SECONDS
            while len(canary.exchanges()) < count and not task.done():
                if time.monotonic() > deadline:  # a wait that gave up
                    raise AssertionError(f"fewer than {count} canary answers")
                await asyncio.sleep(0.05)
            assert not task.done(), "the canary gave up (payload error?)"
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await inner.close()
        return canary.exchanges()

    try:
        exchanges = asyncio.run(run())
    finally:
        engine.stop()
    (series,) = stats.snapshot(time.monotonic())
    return {str(k): v for k, v in series.outcomes.items()}, exchanges


def _url(server: RealTriton, protocol: str) -> str:
    return server.grpc_url if protocol == "grpc" else server.http_url


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_canary_sends_random_strings_and_gets_them_echoed(
    real_triton: RealTriton, protocol: str
) -> None:
    """Breaks if the canary refuses a BYTES model without a sample, or its strings don't echo."""
    outcomes, exchanges = _canary_exchanges(
        _url(real_triton, protocol), "{rate: 20/s, string_length: 24}"
    )
    assert outcomes[str(Outcome.SUCCESS)] >= 5
    assert sum(v for k, v in outcomes.items() if k != str(Outcome.SUCCESS)) == 0
    for tensors, result in exchanges:
        (sent,) = tensors
        assert (sent.name, sent.datatype, sent.data.shape) == ("TEXT", "BYTES", (1, 1))
        value = sent.data.item()
        assert len(value) == 24 and set(value.decode("ascii")) <= set(STRING_CHARACTERS)
        assert result.as_numpy("TEXT_OUT").tolist() == [[value]]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_canary_sends_the_models_string_data(real_triton: RealTriton, protocol: str) -> None:
    """Breaks if a model's canary.string_data is not what reaches (and returns from) Triton."""
    canary = f"{{rate: 20/s, string_length: 3, string_data: '{PROMPT}'}}"
    outcomes, exchanges = _canary_exchanges(_url(real_triton, protocol), canary, count=3)
    assert outcomes[str(Outcome.SUCCESS)] >= 3
    for _, result in exchanges:
        assert result.as_numpy("TEXT_OUT").tolist() == [[PROMPT.encode()]]


def _send_http(payload: bytes, host: str, port: int) -> np.ndarray[Any, Any]:
    with socket.create_connection((host, port), timeout=10) as connection:
        connection.sendall(payload)
        response = HTTPResponse(connection)
        response.begin()
        body = response.read()
        assert response.status == 200, body
        header = response.getheader("Inference-Header-Content-Length")
    result = httpclient.InferResult.from_response_body(
        body, header_length=int(header) if header else None
    )
    return result.as_numpy("TEXT_OUT")


def _send_grpc(payload: bytes, host: str, port: int) -> np.ndarray[Any, Any]:
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        call = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=None,
            response_deserializer=service_pb2.ModelInferResponse.FromString,
        )
        response = call(payload, timeout=10)
    return grpcclient.InferResult(response).as_numpy("TEXT_OUT")


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_sweeps_encoded_request_is_echoed(real_triton: RealTriton, protocol: str) -> None:
    """Breaks if the bytes the sweep's workers send are not the strings prepare_tensors built."""
    settings = SweepSettings(url=_url(real_triton, protocol), model="text", levels=(1,),
                             protocol=protocol, string_length=40)  # type: ignore[arg-type]  # fmt: skip
    tensors, batch = prepare_tensors(settings)
    assert batch == 1
    (text,) = tensors
    assert len(text.data.item()) == 40
    build = grpc_load_spec if protocol == "grpc" else http_load_spec
    spec = build(settings.url, "text", "", tensors, mode="concurrency", concurrency=1)
    send = _send_grpc if protocol == "grpc" else _send_http
    assert send(spec.payload, spec.host, spec.port).tolist() == text.data.tolist()


def _successes(server: RealTriton, model: str) -> int:
    return int(server.stats(model)["inference_stats"]["success"]["count"])


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_sweep_measures_the_bytes_model(
    real_triton: RealTriton, protocol: str, tmp_path: Path
) -> None:
    """Breaks if ``sweep`` refuses a BYTES model, fails there, or ignores the env's length."""
    out = tmp_path / "sweep.json"
    before = _successes(real_triton, "text")
    ran = subprocess.run(
        [TRITONWATCH, "sweep", "--url", _url(real_triton, protocol), "--model", "text",
         "--concurrency", "1,2", "--measurement-interval", "300ms", "--max-windows", "3",
         "--json", str(out)],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "TRITONWATCH_STRING_LENGTH": "64"},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    data = json.loads(out.read_text())
    assert data["settings"]["string_length"] == 64
    assert [step["level"] for step in data["steps"]] == [1, 2]
    for step in data["steps"]:
        assert step["inferences_per_second"] > 0
        assert step["requests"] > 0
        assert step["errors"] == 0
    # Every measured request was answered successfully by the model itself.
    assert _successes(real_triton, "text") - before >= sum(s["requests"] for s in data["steps"])


def test_tune_plans_on_the_bytes_model(real_triton: RealTriton, tmp_path: Path) -> None:
    """Breaks if ``tune`` (plan only) cannot measure a BYTES model or changes its config."""
    out = tmp_path / "tune.json"
    config_before = real_triton.config("text")
    ran = subprocess.run(
        [TRITONWATCH, "tune", "--url", real_triton.http_url, "--model", "text",
         "--budget-p95", "500ms", "--concurrency", "1,2", "--measurement-interval", "300ms",
         "--max-windows", "3", "--metrics-url", real_triton.metrics_url,
         "--string-data", PROMPT, "--json", str(out)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "cannot build requests" not in ran.stdout
    data = json.loads(out.read_text())
    (baseline,) = data["history"]
    assert baseline["verdict"] == "baseline"
    assert baseline["throughput_in_budget"] > 0
    assert data["diff"] == {}
    assert real_triton.config("text") == config_before
