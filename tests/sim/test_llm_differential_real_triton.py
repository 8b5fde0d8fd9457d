"""Differential: a decoupled model on real Triton 2.51 and its twin in the simulator.

The session's real Triton serves ``tests/triton_models/streaming`` (PROMPT → 8 TOKEN responses, then a
flag-only final, as a Python-backend model sends them); the simulator serves an LLM model
configured the same way (``TWIN``). The same requests go to both and the tests compare
what a client sees byte for byte where it is fixed: the config, generate_stream's status,
headers and every chunk, generate's one-response error, the refusals of ``/infer`` and
``ModelInfer``, the errors before a stream, and gRPC ``ModelStreamInfer``'s responses
with and without the empty final. Timing is never compared.
"""

from __future__ import annotations

import json
import queue
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from llm_support import RawAnswer, post_raw
from tritonclient.utils import InferenceServerException

from real_triton import RealTriton
from tritonwatch.sim.models import parse_model_set
from tritonwatch.sim.server import Simulator

# The session server's group, named here as well as by tests/kinds.py from the fixture.
pytestmark = [pytest.mark.real, pytest.mark.xdist_group("real_triton")]

TIMEOUT_S = 30.0
TWIN: dict[str, Any] = {
    "name": "streaming",
    "backend": "python",
    "max_batch_size": 0,
    "input": [{"name": "PROMPT", "data_type": "TYPE_STRING", "dims": [1]}],
    "output": [{"name": "TOKEN", "data_type": "TYPE_STRING", "dims": [1]}],
    "instance_group": {"name": "streaming", "kind": "KIND_CPU", "count": 1},
    "parameters": {"tokens": "8", "first_token_ms": "20", "token_gap_ms": "5"},
    "llm": {
        "backend": "python",
        "text_input": "PROMPT",
        "text_output": "TOKEN",
        "default_max_tokens": 8,
        "final_flag_only": True,
        "prefill_per_token": 0,
        "decode_step_base": "5ms",
        "decode_step_per_seq": 0,
    },
}
"""tests/triton_models/streaming/config.pbtxt as a simulator model (its parameters shown
in the config as Triton shows them; the cost model stands in for the sleeps)."""


@dataclass
class Pair:
    real: RealTriton
    sim: Simulator

    def both(self, path: str, document: Any) -> tuple[RawAnswer, RawAnswer]:
        return (
            post_raw(self.real.http_url, path, document),
            post_raw(self.sim.http_url, path, document),
        )


@pytest.fixture(scope="module")
def pair(real_triton: RealTriton) -> Iterator[Pair]:
    """The session's real Triton (its ``streaming`` model is the file's), and the
    simulator with the twin. Nothing here changes the model, so the shared server does."""
    model_set = parse_model_set(
        {"gpus": [{"uuid": "GPU-d1ff0000-0000-4000-8000-000000000001"}], "models": [TWIN]}
    )
    with Simulator(model_set) as sim:
        yield Pair(real_triton, sim)


def same_answer(real: RawAnswer, sim: RawAnswer) -> None:
    """Status, content type, framing and every chunk (or the whole body) agree."""
    assert sim.status == real.status
    for header in ("content-type", "transfer-encoding"):
        assert sim.headers.get(header) == real.headers.get(header), header
    assert sim.chunks == real.chunks


def test_config_matches(pair: Pair) -> None:
    """GET …/config prints the same document, model_transaction_policy included."""
    real = pair.real.config("streaming")
    with urllib.request.urlopen(
        pair.sim.http_url + "/v2/models/streaming/config", timeout=TIMEOUT_S
    ) as answer:
        sim = json.loads(answer.read())
    assert sim == real
    assert sim["model_transaction_policy"] == {"decoupled": True}


@pytest.mark.parametrize(
    "document",
    [
        {"PROMPT": "hi"},
        {"PROMPT": ["hi"], "id": "42", "foo": 3, "parameters": {"bar": True}},
    ],
    ids=["plain", "id-and-parameters"],
)
def test_generate_stream_chunks_match(pair: Pair, document: dict[str, Any]) -> None:
    """Breaks if any generate_stream chunk differs in bytes from real Triton's."""
    real, sim = pair.both("/v2/models/streaming/generate_stream", document)
    assert real.status == 200 and len(real.chunks) == 8
    same_answer(real, sim)


@pytest.mark.parametrize(
    ("path", "document"),
    [
        ("/v2/models/streaming/generate", {"PROMPT": "hi"}),
        ("/v2/models/streaming/infer", {"inputs": []}),
        ("/v2/models/streaming/generate_stream", {"NOPE": "hi"}),
        ("/v2/models/streaming/generate_stream", [1]),
        ("/v2/models/nope/generate_stream", {"PROMPT": "hi"}),
    ],
    ids=["generate-many", "infer-decoupled", "missing-input", "not-an-object", "unknown-model"],
)
def test_refusals_match(pair: Pair, path: str, document: Any) -> None:
    """Breaks if a refusal's status, content type or body differs from real Triton's."""
    real, sim = pair.both(path, document)
    same_answer(real, sim)


def grpc_stream(address: str, requests: list[dict[str, Any]], count: int) -> list[Any]:
    """Sends ``requests`` on one stream and reads ``count`` results, then sends a sentinel
    request (an unknown model, answered at once) and reads up to its error, so anything
    sent beyond the ``count`` expected shows. Results are (id, final, outputs) or the
    error message."""
    client = grpcclient.InferenceServerClient(address)
    results: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    prompt = grpcclient.InferInput("PROMPT", [1], "BYTES")
    prompt.set_data_from_numpy(np.array([b"hi"], dtype=np.object_))

    def next_result() -> Any:
        result, error = results.get(timeout=TIMEOUT_S)
        if error is not None:
            return error.message()
        response = result.get_response()
        token = result.as_numpy("TOKEN")
        return (
            response.id,
            response.parameters["triton_final_response"].bool_param,
            None if token is None else token.tolist(),
        )

    try:
        for request in requests:
            client.async_stream_infer(inputs=[prompt], **request)
        seen = [next_result() for _ in range(count)]
        client.async_stream_infer(inputs=[prompt], model_name="sentinel", request_id="end")
        while (item := next_result()) != SENTINEL_ERROR:
            seen.append(item)
        return seen
    finally:
        client.stop_stream()
        client.close()


SENTINEL_ERROR = "Request for unknown model: 'sentinel' is not found"


def test_grpc_stream_responses_match(pair: Pair) -> None:
    """Breaks if ModelStreamInfer responses, finals or in-band errors differ from real Triton."""
    requests = [
        {"model_name": "streaming", "request_id": "a", "enable_empty_final_response": True},
        {"model_name": "nope", "request_id": "b"},
        {"model_name": "streaming", "request_id": "c"},
    ]
    real = grpc_stream(pair.real.grpc_address, requests, 18)
    sim = grpc_stream(pair.sim.grpc_url, requests, 18)
    assert sorted(map(str, sim)) == sorted(map(str, real))  # requests interleave freely
    for side in (real, sim):
        assert [item for item in side if isinstance(item, tuple) and item[0] == "a"] == [
            ("a", False, [f"token{index}".encode()]) for index in range(8)
        ] + [("a", True, None)]


def test_grpc_model_infer_refusals_match(pair: Pair) -> None:
    """ModelInfer on the decoupled model: the same status and message."""
    answers = []
    for address in (pair.real.grpc_address, pair.sim.grpc_url):
        client = grpcclient.InferenceServerClient(address)
        prompt = grpcclient.InferInput("PROMPT", [1], "BYTES")
        prompt.set_data_from_numpy(np.array([b"hi"], dtype=np.object_))
        try:
            with pytest.raises(InferenceServerException) as raised:
                client.infer("streaming", [prompt])
        finally:
            client.close()
        answers.append((raised.value.status(), raised.value.message()))
    assert answers[1] == answers[0]
