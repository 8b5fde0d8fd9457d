"""The test model repository on the real server: each model does what its config says."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from real_triton import ALL_MODELS, RealTriton

pytestmark = pytest.mark.real


def _infer(
    server: RealTriton, model: str, name: str, array: np.ndarray, datatype: str
) -> httpclient.InferResult:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    tensor = httpclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return client.infer(model, [tensor])


def test_every_model_is_ready_and_listed(real_triton: RealTriton) -> None:
    """Breaks if a model in tests/triton_models stops loading on the real server."""
    status, body = real_triton.request("POST", "/v2/repository/index", {})
    assert status == 200
    index = {entry["name"]: entry["state"] for entry in json.loads(body)}
    assert index == dict.fromkeys(ALL_MODELS, "READY")
    assert set(ALL_MODELS) == {
        "batching",
        "dynamic_shape",
        "flaky",
        "llm_stream",
        "needs_two",
        "optional_input",
        "slow_queue",
        "streaming",
        "text",
        "waiting_cpu",
    } | {"prep", "core", "post", "pipeline", "bls"} | {  # test_pipeline_models_real_triton.py
        "seq",  # test_stateful_cached_inputs_real_triton.py, as the two below
        "cached",
        "refuses",
    } | {"saturating"}  # test_real_triton_capacity.py


def test_batching_model_echoes_and_takes_its_service_time(real_triton: RealTriton) -> None:
    """Breaks if the identity model stops echoing or stops sleeping base_ms per execution
    (Triton's own compute time for the one execution: a sleep, never shorter)."""
    base_ms = float(real_triton.config("batching")["parameters"]["base_ms"]["string_value"])
    assert base_ms >= 2
    data = np.arange(16, dtype=np.float32).reshape(1, 16)
    before = real_triton.stats("batching")["inference_stats"]["compute_infer"]
    result = _infer(real_triton, "batching", "INPUT0", data, "FP32")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    after = real_triton.stats("batching")["inference_stats"]["compute_infer"]
    assert after["count"] - before["count"] == 1
    assert after["ns"] - before["ns"] >= base_ms * 1_000_000


def test_bytes_model_echoes_strings(real_triton: RealTriton) -> None:
    """Breaks if BYTES tensors crash the Python backend stub (numpy 2 in its environment)."""
    data = np.array([[b"hello"], [b"world!"]], dtype=np.object_)
    result = _infer(real_triton, "text", "TEXT", data, "BYTES")
    assert result.as_numpy("TEXT_OUT").tolist() == [[b"hello"], [b"world!"]]


def test_flaky_model_fails_on_a_negative_input(real_triton: RealTriton) -> None:
    """Breaks if the on-demand failure stops failing (the canary's failure tests rely on it)."""
    client = httpclient.InferenceServerClient(f"127.0.0.1:{real_triton.http_port}")
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.array([[-1, 0, 0, 0]], dtype=np.float32))
    with pytest.raises(InferenceServerException, match="negative input"):
        client.infer("flaky", [tensor])


def test_streaming_model_sends_its_tokens_over_grpc(real_triton: RealTriton) -> None:
    """Breaks if the decoupled model stops streaming 8 responses per request."""
    responses: list[object] = []
    client = grpcclient.InferenceServerClient(real_triton.grpc_address)
    client.start_stream(callback=lambda result, error: responses.append(error or result))
    prompt = grpcclient.InferInput("PROMPT", [1], "BYTES")
    prompt.set_data_from_numpy(np.array([b"hi"], dtype=np.object_))
    client.async_stream_infer("streaming", [prompt], enable_empty_final_response=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(
        isinstance(r, grpcclient.InferResult)
        and r.get_response().parameters["triton_final_response"].bool_param
        for r in responses
    ):
        time.sleep(0.01)
    client.stop_stream()
    tokens = [
        r.as_numpy("TOKEN")
        for r in responses
        if isinstance(r, grpcclient.InferResult) and r.as_numpy("TOKEN") is not None
    ]
    assert [t.tolist() for t in tokens] == [[f"token{i}".encode()] for i in range(8)]
