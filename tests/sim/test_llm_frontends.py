"""The LLM model's streaming frontends on the simulator, framed as real Triton 2.51 frames
them (recorded against tritonserver 2.51 with tests/triton_models/streaming: one chunk per
``data:`` event, keys sorted, one-element tensors unwrapped, no event for a flag-only final,
``triton_final_response`` on every gRPC response, the empty final only on request), plus
the OpenAI routes as vLLM and Triton's OpenAI frontend frame them."""

from __future__ import annotations

import json
import queue
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from llm_support import llm_model_set, post_raw, sse_data
from tritonclient.utils import InferenceServerException

from tritonwatch.sim.server import Simulator

pytestmark = pytest.mark.sim

TIMEOUT_S = 10.0


@pytest.fixture
def llm_sim(start_sim: Callable[..., Simulator]) -> Simulator:
    """A simulator serving the LLM test models."""
    return start_sim(models=llm_model_set(), seed=0)


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as answer:
        return json.loads(answer.read())


def test_generate_stream_sends_one_chunked_event_per_token(llm_sim: Simulator) -> None:
    """Breaks if generate_stream's status, content type, chunking or JSON shape leaves Triton's."""
    answer = post_raw(
        llm_sim.http_url,
        "/v2/models/trt/generate_stream",
        {"text_input": "hello world", "max_tokens": 4, "stream": True, "id": "42"},
    )
    assert answer.status == 200
    assert answer.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert answer.headers["transfer-encoding"] == "chunked"
    assert all(chunk.startswith(b"data: ") and chunk.endswith(b"\n\n") for chunk in answer.chunks)
    assert [sse_data(chunk) for chunk in answer.chunks] == [
        [f'{{"id":"42","model_name":"trt","model_version":"1","text_output":"token{index}"}}']
        for index in range(4)
    ]


def test_generate_fields_map_from_the_parameters_object(llm_sim: Simulator) -> None:
    """Inputs may come inside "parameters" and as one-element arrays, as Triton maps them."""
    answer = post_raw(
        llm_sim.http_url,
        "/v2/models/trt/versions/1/generate_stream",
        {"text_input": ["hi"], "parameters": {"max_tokens": 2, "temperature": 0.5}},
    )
    events = [json.loads(data) for data in sse_data(answer.body)]
    assert [event["text_output"] for event in events] == ["token0", "token1"]
    assert "id" not in events[0] and "temperature" not in events[0]


def test_a_flag_only_final_writes_no_event(llm_sim: Simulator) -> None:
    """Breaks if a flag-only final writes an event (Triton writes none)."""
    answer = post_raw(
        llm_sim.http_url, "/v2/models/pyllm/generate_stream", {"text_input": "x", "max_tokens": 3}
    )
    assert len(sse_data(answer.body)) == 3


def test_generate_accepts_one_response_and_refuses_more_with_200(llm_sim: Simulator) -> None:
    """/generate: one token is one JSON answer; more than one is Triton's error, in a 200."""
    one = post_raw(
        llm_sim.http_url, "/v2/models/pyllm/generate", {"text_input": "x", "max_tokens": 1}
    )
    assert one.status == 200 and one.headers["content-type"] == "application/json"
    assert json.loads(one.body) == {
        "model_name": "pyllm",
        "model_version": "1",
        "text_output": "token0",
    }
    many = post_raw(llm_sim.http_url, "/v2/models/trt/generate", {"text_input": "x"})
    assert many.status == 200
    assert json.loads(many.body) == {
        "error": "generate expects model to produce exactly 1 response, use generate stream "
        "for model that generates various number of responses"
    }


@pytest.mark.parametrize(
    ("path", "document", "status", "message"),
    [
        (
            "/v2/models/nope/generate_stream",
            {"text_input": "x"},
            404,
            "Request for unknown model: 'nope' is not found",
        ),
        (
            "/v2/models/trt/generate_stream",
            {"prompt": "x"},
            400,
            "[request id: <id_unknown>] expected number of inputs between 1 and 3 but got 0 "
            "inputs for model 'trt'. Got input(s) [], but missing required input(s) "
            "['text_input']. Please provide all required input(s).",
        ),
    ],
)
def test_errors_before_the_stream_are_json_with_tritons_status(
    llm_sim: Simulator, path: str, document: dict[str, Any], status: int, message: str
) -> None:
    """An error before the first response: application/json {"error"} and its status."""
    answer = post_raw(llm_sim.http_url, path, document)
    assert answer.status == status
    assert answer.headers["content-type"] == "application/json"
    assert json.loads(answer.body) == {"error": message}


def test_a_rejected_request_fails_before_the_stream(llm_sim: Simulator) -> None:
    """An error burst of REJECTED answers 503 JSON before any event, counted REJECTED."""
    llm_sim.inject_fault(kind="error_burst", reason="REJECTED", fraction=1.0, model="trt")
    answer = post_raw(llm_sim.http_url, "/v2/models/trt/generate_stream", {"text_input": "x"})
    assert answer.status == 503
    assert json.loads(answer.body) == {"error": "Exceeds maximum queue size"}


def test_a_backend_failure_mid_stream_is_an_error_event_after_200(llm_sim: Simulator) -> None:
    """Breaks if a mid-stream failure is not a data: {"error"} event in a 200 stream."""
    llm_sim.inject_fault(kind="error_burst", reason="BACKEND", fraction=1.0, model="trt")
    answer = post_raw(
        llm_sim.http_url, "/v2/models/trt/generate_stream", {"text_input": "x", "max_tokens": 5}
    )
    assert answer.status == 200
    payloads = [json.loads(data) for data in sse_data(answer.body)]
    assert payloads[0]["text_output"] == "token0"
    assert payloads[1:] == [{"error": "simulated backend failure in 'trt'"}]


def test_infer_on_a_decoupled_model_is_refused_as_triton_does(llm_sim: Simulator) -> None:
    """/v2/…/infer on a decoupled model: 501 text/plain with Triton 2.51's message."""
    answer = post_raw(llm_sim.http_url, "/v2/models/trt/infer", {"inputs": []})
    assert answer.status == 501
    assert answer.headers["content-type"] == "text/plain"
    assert json.loads(answer.body) == {
        "error": "HTTP end point doesn't support models with decoupled transaction policy"
    }


def test_the_config_says_decoupled_only_for_llm_models(llm_sim: Simulator) -> None:
    """Breaks if the config misplaces or omits decoupled: true, or puts it on plain models."""
    config = get_json(f"{llm_sim.http_url}/v2/models/trt/config")
    assert list(config)[-1] == "model_transaction_policy"
    assert config["model_transaction_policy"] == {"decoupled": True}
    assert [tensor["name"] for tensor in config["input"]] == ["text_input", "max_tokens", "stream"]
    assert [tensor["name"] for tensor in config["output"]] == ["text_output"]
    assert config["backend"] == "tensorrt_llm"
    assert "model_transaction_policy" not in get_json(f"{llm_sim.http_url}/v2/models/text/config")


def test_generate_on_a_plain_model_is_refused(llm_sim: Simulator) -> None:
    """The simulator streams only LLM models (a documented difference): 501 JSON."""
    answer = post_raw(llm_sim.http_url, "/v2/models/text/generate", {"INPUT0": "x"})
    assert answer.status == 501
    assert "streams only llm models" in json.loads(answer.body)["error"]


# -- OpenAI -----------------------------------------------------------------------------


def test_chat_stream_has_a_role_chunk_tokens_usage_and_done(llm_sim: Simulator) -> None:
    """Breaks if chat streaming loses the role chunk, finish_reason, usage chunk or [DONE]."""
    answer = post_raw(
        llm_sim.http_url,
        "/v1/chat/completions",
        {
            "model": "vl",
            "messages": [{"role": "user", "content": "one two three"}],
            "max_tokens": 3,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert answer.status == 200
    assert answer.headers["content-type"] == "text/event-stream; charset=utf-8"
    payloads = sse_data(answer.body)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(data) for data in payloads[:-1]]
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert len({chunk["id"] for chunk in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    deltas = [chunk["choices"][0]["delta"]["content"] for chunk in chunks[1:-1]]
    assert deltas == ["token0", "token1", "token2"]
    assert [chunk["choices"][0]["finish_reason"] for chunk in chunks[1:-1]] == [
        None,
        None,
        "length",
    ]
    assert chunks[-1]["choices"] == []
    # 3 words × 1.3 tokens per word = 3.9 → 4 prompt tokens
    assert chunks[-1]["usage"] == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}


def test_completions_stream_without_usage_ends_with_done(llm_sim: Simulator) -> None:
    """Breaks if completion chunks change shape or send usage unasked."""
    answer = post_raw(
        llm_sim.http_url,
        "/v1/completions",
        {"model": "trt", "prompt": "hi", "max_tokens": 2, "stream": True},
    )
    payloads = sse_data(answer.body)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(data) for data in payloads[:-1]]
    assert [chunk["object"] for chunk in chunks] == ["text_completion"] * 2
    assert [chunk["choices"][0]["text"] for chunk in chunks] == ["token0", "token1"]
    assert all("usage" not in chunk for chunk in chunks)


def test_completions_without_stream_answer_once_with_usage(llm_sim: Simulator) -> None:
    """stream false: one JSON completion with the whole text and the usage."""
    answer = post_raw(
        llm_sim.http_url, "/v1/completions", {"model": "vl", "prompt": "a b", "max_tokens": 2}
    )
    completion = json.loads(answer.body)
    assert completion["object"] == "text_completion"
    assert completion["choices"][0]["text"] == "token0token1"
    assert completion["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def test_openai_errors_before_and_during_the_stream(llm_sim: Simulator) -> None:
    """Breaks if OpenAI errors lose their status before, or the error chunk during, a stream."""
    unknown = post_raw(
        llm_sim.http_url, "/v1/completions", {"model": "nope", "prompt": "x", "stream": True}
    )
    assert unknown.status == 404
    assert json.loads(unknown.body)["error"]["message"] == (
        "Request for unknown model: 'nope' is not found"
    )
    llm_sim.inject_fault(kind="error_burst", reason="BACKEND", fraction=1.0, model="vl")
    failing = post_raw(
        llm_sim.http_url,
        "/v1/chat/completions",
        {"model": "vl", "messages": [{"role": "user", "content": "x"}], "stream": True},
    )
    payloads = sse_data(failing.body)
    assert payloads[-1] == "[DONE]"
    error = json.loads(payloads[-2])
    assert error["error"]["message"] == "simulated backend failure in 'vl'"
    assert error["error"]["code"] == 500


# -- gRPC -------------------------------------------------------------------------------


@pytest.fixture
def stream_client(
    llm_sim: Simulator,
) -> Iterator[tuple[grpcclient.InferenceServerClient, queue.Queue[Any]]]:
    """A tritonclient gRPC client with a started stream and its callback's queue."""
    client = grpcclient.InferenceServerClient(llm_sim.grpc_url)
    results: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    yield client, results
    client.stop_stream()
    client.close()


def llm_inputs(prompt: bytes, max_tokens: int) -> list[grpcclient.InferInput]:
    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([prompt], dtype=np.object_))
    tokens = grpcclient.InferInput("max_tokens", [1], "INT32")
    tokens.set_data_from_numpy(np.array([max_tokens], dtype=np.int32))
    return [text, tokens]


def read(results: queue.Queue[Any], count: int) -> list[tuple[str, bool, Any]]:
    """``count`` responses as (id, triton_final_response, text_output or None)."""
    seen = []
    for _ in range(count):
        result, error = results.get(timeout=TIMEOUT_S)
        assert error is None, error
        response = result.get_response()
        text = result.as_numpy("text_output")
        seen.append(
            (
                response.id,
                response.parameters["triton_final_response"].bool_param,
                None if text is None else text.tolist(),
            )
        )
    return seen


def test_grpc_stream_marks_the_last_token_final(
    stream_client: tuple[grpcclient.InferenceServerClient, queue.Queue[Any]],
) -> None:
    """Breaks if triton_final_response is wrong on any token or an empty final is added."""
    client, results = stream_client
    client.async_stream_infer(
        "trt", llm_inputs(b"hi", 3), request_id="7", enable_empty_final_response=True
    )
    assert read(results, 3) == [
        ("7", False, [b"token0"]),
        ("7", False, [b"token1"]),
        ("7", True, [b"token2"]),
    ]
    assert results.empty()


def test_grpc_empty_final_comes_only_on_request(
    stream_client: tuple[grpcclient.InferenceServerClient, queue.Queue[Any]],
) -> None:
    """Breaks if the empty final comes without triton_enable_empty_final_response or not with it."""
    client, results = stream_client
    client.async_stream_infer(
        "pyllm", llm_inputs(b"hi", 2), request_id="a", enable_empty_final_response=True
    )
    assert read(results, 3) == [
        ("a", False, [b"token0"]),
        ("a", False, [b"token1"]),
        ("a", True, None),
    ]
    client.async_stream_infer("pyllm", llm_inputs(b"hi", 2), request_id="b")
    assert read(results, 2) == [("b", False, [b"token0"]), ("b", False, [b"token1"])]
    client.async_stream_infer("trt", llm_inputs(b"hi", 1), request_id="c")
    assert read(results, 1) == [("c", True, [b"token0"])]  # the stream moved on: "b" sent no more


def test_grpc_stream_errors_are_in_band_and_the_stream_stays_open(
    stream_client: tuple[grpcclient.InferenceServerClient, queue.Queue[Any]],
) -> None:
    """An unknown model answers an in-band error_message; the same stream then serves."""
    client, results = stream_client
    client.async_stream_infer("nope", llm_inputs(b"hi", 1), request_id="x")
    result, error = results.get(timeout=TIMEOUT_S)
    assert result is None
    assert isinstance(error, InferenceServerException)
    assert error.message() == "Request for unknown model: 'nope' is not found"
    client.async_stream_infer("trt", llm_inputs(b"hi", 1), request_id="y")
    assert read(results, 1) == [("y", True, [b"token0"])]


def test_grpc_model_infer_refuses_a_decoupled_model(llm_sim: Simulator) -> None:
    """ModelInfer on a decoupled model: UNIMPLEMENTED with Triton 2.51's message."""
    client = grpcclient.InferenceServerClient(llm_sim.grpc_url)
    try:
        with pytest.raises(InferenceServerException) as raised:
            client.infer("trt", llm_inputs(b"hi", 1))
    finally:
        client.close()
    assert raised.value.status() == "StatusCode.UNIMPLEMENTED"
    assert raised.value.message() == (
        "ModelInfer RPC doesn't support models with decoupled transaction policy"
    )


def test_sim_state_shows_the_llm_engine(llm_sim: Simulator) -> None:
    """Breaks if /sim/state stops showing an LLM model's engine, or shows one for a plain model."""
    models = {model["name"]: model for model in llm_sim.state()["models"]}
    assert models["trt"]["llm"] == {
        "running": 0,
        "waiting": 0,
        "kv_blocks_used": 0,
        "kv_blocks": 4096,
        "preemptions": 0,
    }
    assert "llm" not in models["text"]
