"""The streaming codecs against the servers' own samples (docs/plans/issue18.md A1-A4),
the real server's recorded stream, and the prompt sampler."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from support import fixtures_dir
from tritonwatch.kserve.payload import PayloadError, TensorSpec, build_inputs
from tritonwatch.kserve.stream_request import (
    WORDS,
    GenerateCodec,
    GrpcStreamCodec,
    OpenAICodec,
    Piece,
    PromptSampler,
    StreamDecodeError,
    StreamFields,
)
from tritonwatch.wire.http1 import ChunkedDecoder, response_head
from tritonwatch.wire.sse import SseParser

DEFAULTS = StreamFields()
LLM_STREAM = [
    TensorSpec("text_input", "BYTES", (1,)),
    TensorSpec("max_tokens", "INT32", (1,), optional=True),
    TensorSpec("stream", "BOOL", (1,), optional=True),
]
"""tests/triton_models/llm_stream."""
TRTLLM_ENSEMBLE = [
    TensorSpec("text_input", "BYTES", (1, 1)),
    TensorSpec("max_tokens", "INT32", (1, 1)),
    TensorSpec("end_id", "INT32", (1, 1), optional=True),
    TensorSpec("pad_id", "INT32", (1, 1), optional=True),
    TensorSpec("top_k", "INT32", (1, 1), optional=True),
    TensorSpec("top_p", "FP32", (1, 1), optional=True),
    TensorSpec("exclude_input_in_output", "BOOL", (1, 1), optional=True),
    TensorSpec("stream", "BOOL", (1, 1), optional=True),
]
"""Part of tensorrtllm_backend all_models/inflight_batcher_llm/ensemble/config.pbtxt
(max_batch_size > 0: the batch dim resolved to 1 by payload.input_specs)."""
VLLM_BACKEND = [
    TensorSpec("text_input", "BYTES", (1,)),
    TensorSpec("stream", "BOOL", (1,), optional=True),
    TensorSpec("sampling_parameters", "BYTES", (1,), optional=True),
    TensorSpec("exclude_input_in_output", "BOOL", (1,), optional=True),
    TensorSpec("return_num_output_tokens", "BOOL", (1,), optional=True),
]
"""vllm_backend src/model.py::_auto_complete_inputs_and_outputs (part)."""

TRTLLM_LINE = r'{"batch_index":0,"context_logits":0.0,"cum_log_probs":0.0,"generation_logits":0.0,"id":"42","model_name":"ensemble","model_version":"1","output_log_probs":[0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0],"sequence_end":false,"sequence_id":0,"sequence_index":0,"sequence_start":false,"text_output":"If I had to write a haiku for this one, it would be:.\\nMerlion spouts water.\\nMarina"}'
"""The ``data:`` line of tensorrtllm_backend docs/multimodal.md @c2e65b8, verbatim (its
``\\n`` are the doc's: an escaped backslash, then n)."""
ROLE_CHUNK = '{"id":"cmpl-7","object":"chat.completion.chunk","created":1733000000,"model":"llama","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}'
CONTENT_CHUNK = '{"id":"cmpl-7","object":"chat.completion.chunk","created":1733000000,"model":"llama","choices":[{"index":0,"delta":{"content":" Hello"},"logprobs":null,"finish_reason":null}]}'
USAGE_CHUNK = '{"id":"cmpl-7","object":"chat.completion.chunk","created":1733000000,"model":"llama","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":16,"total_tokens":28}}'
COMPLETION_CHUNK = '{"id":"cmpl-8","object":"text_completion","created":1733000000,"model":"llama","choices":[{"index":0,"text":" world","logprobs":null,"finish_reason":null}]}'
VLLM_ERROR = '{"error":{"object":"error","message":"The model `x` does not exist.","type":"NotFoundError","param":null,"code":404}}'
"""Chunks shaped as A4 describes them (vLLM serving_chat / serving_completion, Triton's
OpenAI frontend: role-only first chunk, usage chunk with ``choices: []``, error object)."""


def _body(encoded: bytes) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(encoded)
    return decoded


# -- generate_stream ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("inputs", "body"),
    [
        (LLM_STREAM, {"text_input": "hi there", "max_tokens": 16, "stream": True}),
        (TRTLLM_ENSEMBLE, {"text_input": "hi there", "max_tokens": 16, "stream": True}),
        (
            VLLM_BACKEND,
            {
                "text_input": "hi there",
                "sampling_parameters": '{"max_tokens": 16}',
                "stream": True,
                "return_num_output_tokens": True,
            },
        ),
        (LLM_STREAM[:1], {"text_input": "hi there"}),
    ],
    ids=["llm_stream", "trtllm-ensemble", "vllm-backend", "text-only"],
)
def test_generate_sends_only_the_inputs_the_model_has(
    inputs: list[TensorSpec], body: dict[str, Any]
) -> None:
    """Breaks if an input the model lacks is sent (Triton would take it as a request
    parameter and the model would ignore max_tokens), or the vLLM backend stops getting
    max_tokens inside sampling_parameters and a token count asked for."""
    codec = GenerateCodec("ensemble", "", DEFAULTS, inputs=inputs)
    assert codec.path == "/v2/models/ensemble/generate_stream"
    assert _body(codec.encode("hi there", 16)) == body


def test_generate_adds_the_extra_parameters_and_lets_them_win() -> None:
    """Breaks if ``parameters`` stop reaching the body, or stop overriding a default."""
    fields = StreamFields(parameters={"end_id": 2, "top_p": 0.5, "stream": False})
    codec = GenerateCodec("ensemble", "1", fields, inputs=TRTLLM_ENSEMBLE)
    assert codec.path == "/v2/models/ensemble/versions/1/generate_stream"
    assert _body(codec.encode("p", 4)) == {
        "text_input": "p",
        "max_tokens": 4,
        "stream": False,
        "end_id": 2,
        "top_p": 0.5,
    }


def test_generate_reads_the_trtllm_line_and_the_error_event() -> None:
    """Breaks if a real TRT-LLM event's scalar text_output is not the piece's text, or a
    mid-stream ``{"error": ...}`` is read as content instead of an error."""
    codec = GenerateCodec("ensemble", "", DEFAULTS, inputs=TRTLLM_ENSEMBLE)
    assert codec.decode(TRTLLM_LINE) == Piece(
        "If I had to write a haiku for this one, it would be:.\\nMerlion spouts water.\\nMarina"
    )
    assert codec.decode('{"error":"fail_after: failure asked for after 2 tokens"}') == Piece(
        None, error="fail_after: failure asked for after 2 tokens"
    )


def test_generate_joins_lists_counts_tokens_and_treats_empty_text_as_none() -> None:
    """Breaks if a [-1]-shaped text_output is not joined, an empty one counts as a token,
    or the vLLM backend's num_output_tokens is not the piece's count."""
    codec = GenerateCodec("vllm", "", DEFAULTS, inputs=VLLM_BACKEND)
    assert codec.decode('{"text_output":["a","b"],"num_output_tokens":[2]}') == Piece("ab", 2)
    assert codec.decode('{"text_output":"","num_output_tokens":0}') == Piece(None, 0)
    assert codec.decode('{"model_name":"vllm","model_version":"1"}') == Piece(None)


@pytest.mark.parametrize("data", ["not json", "[1]", '"text"', '{"num_output_tokens":"3"}'])
def test_generate_refuses_what_it_cannot_read(data: str) -> None:
    """Breaks if an unreadable event is taken as an empty piece (a bad response would
    pass as a stream without tokens) instead of raising StreamDecodeError."""
    codec = GenerateCodec("m", "", DEFAULTS, inputs=LLM_STREAM)
    with pytest.raises(StreamDecodeError):
        codec.decode(data)


def _pieces(recording: str, codec: GenerateCodec) -> list[tuple[float, Piece]]:
    """A recorded answer fed one byte per read (read n stamped n) through the chunked
    decoder, the SSE parser and ``codec``: (stamp, piece) per event."""
    answer = (fixtures_dir() / "generate_stream" / recording).read_bytes()
    head = response_head(answer)
    assert head is not None and head.chunked
    decoder, parser, pieces = ChunkedDecoder(), SseParser(), []
    for stamp, byte in enumerate(answer[head.length :]):
        for event in parser.feed(decoder.feed(bytes([byte])), float(stamp)):
            pieces.append((event.stamp, codec.decode(event.data)))
    assert decoder.done and not parser.pending
    return pieces


def test_the_real_servers_stream_decodes_to_its_tokens() -> None:
    """Breaks if the bytes real Triton sent (tests/fixtures/generate_stream) stop coming
    out of chunked decoder, SSE parser and codec as one piece per token, each stamped by
    the read holding the last byte of its event."""
    codec = GenerateCodec("llm_stream", "", DEFAULTS, inputs=LLM_STREAM)
    pieces = _pieces("llm_stream_4_tokens.http", codec)
    assert [piece for _, piece in pieces] == [Piece(f"token{i}") for i in range(4)]
    # Each chunk: "4e\r\n" (bytes 0-3), 78 bytes of event, "\r\n": 84 bytes; the event
    # ends with its 78th byte.
    assert [stamp for stamp, _ in pieces] == [84.0 * i + 4 + 77 for i in range(4)]


def test_the_real_servers_mid_stream_error_decodes_as_an_error() -> None:
    """Breaks if the recorded error event after two tokens is not read as an error."""
    codec = GenerateCodec("llm_stream", "", DEFAULTS, inputs=LLM_STREAM)
    assert [piece for _, piece in _pieces("llm_stream_fail_after_2.http", codec)] == [
        Piece("token0"),
        Piece("token1"),
        Piece(None, error="fail_after: failure asked for after 2 tokens"),
    ]


STREAMING = [TensorSpec("PROMPT", "BYTES", (1,))]
"""tests/triton_models/streaming: no text_input, output TOKEN."""


def test_a_model_without_a_text_input_gets_the_plain_canarys_tensors() -> None:
    """Breaks if a decoupled model with other names stops being sent its built inputs
    as generate fields, or its outputs stop counting as content."""
    tensors = build_inputs("streaming", STREAMING, {}, string_length=8, seed=3)
    codec = GenerateCodec("streaming", "", DEFAULTS, inputs=STREAMING, outputs=["TOKEN"], fallback=tensors)  # fmt: skip
    assert _body(codec.encode("ignored", 5)) == {"PROMPT": tensors[0].values()[0].decode()}
    assert len(_body(codec.encode("ignored", 5))["PROMPT"]) == 8
    event = '{"model_name":"streaming","model_version":"1","TOKEN":"token0"}'
    assert codec.decode(event) == Piece("token0")


def test_a_model_without_a_text_input_or_tensors_is_refused() -> None:
    """Breaks if a model the codec cannot fill is accepted (every request would fail)
    instead of raising the PayloadError the canary reports as skipped."""
    with pytest.raises(PayloadError, match=r"'text_input'.*it has: PROMPT"):
        GenerateCodec("streaming", "", DEFAULTS, inputs=STREAMING)


# -- OpenAI-compatible ---------------------------------------------------------------------


def test_openai_chat_and_completions_bodies() -> None:
    """Breaks if the chat or completions request loses stream, max_tokens, the usage
    option, the served model name or the extra parameters."""
    fields = StreamFields(served_name="meta-llama/Llama-3.1-8B-Instruct", parameters={"temperature": 0})  # fmt: skip
    chat = OpenAICodec("llama", fields)
    assert chat.path == "/v1/chat/completions"
    assert _body(chat.encode("hi", 8)) == {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 8,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
    }
    completions = OpenAICodec("llama", DEFAULTS, api="completions", include_usage=False)
    assert completions.path == "/v1/completions"
    assert _body(completions.encode("hi", 8)) == {
        "model": "llama",
        "prompt": "hi",
        "max_tokens": 8,
        "stream": True,
    }


def test_openai_chat_chunks_role_content_usage_done_and_error() -> None:
    """Breaks if the role-only first chunk counts as a token, content is missed, the
    usage chunk's completion_tokens is not the count, [DONE] does not end the stream, or
    an error object is not read as an error with its message."""
    codec = OpenAICodec("llama", DEFAULTS)
    assert [codec.decode(data) for data in (ROLE_CHUNK, CONTENT_CHUNK, USAGE_CHUNK, "[DONE]")] == [
        Piece(None),
        Piece(" Hello"),
        Piece(None, 16),
        Piece(None, final=True),
    ]
    assert codec.decode(VLLM_ERROR) == Piece(None, error="The model `x` does not exist.")
    reasoning = '{"choices":[{"index":0,"delta":{"reasoning_content":"Hmm"}}]}'
    assert codec.decode(reasoning) == Piece("Hmm")


def test_openai_completion_chunks() -> None:
    """Breaks if a completion chunk's ``choices[0].text`` is not the piece's text."""
    codec = OpenAICodec("llama", DEFAULTS, api="completions")
    assert codec.decode(COMPLETION_CHUNK) == Piece(" world")
    assert codec.decode('{"choices":[{"index":0,"text":""}]}') == Piece(None)


@pytest.mark.parametrize("data", ["{", '{"object":"chat.completion.chunk"}', "[]"])
def test_openai_refuses_what_it_cannot_read(data: str) -> None:
    """Breaks if a chunk with no choices list passes as an empty piece."""
    with pytest.raises(StreamDecodeError):
        OpenAICodec("llama", DEFAULTS).decode(data)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
_keys = st.sampled_from(["text_output", "num_output_tokens", "error", "choices", "usage", "delta", "text", "content", "completion_tokens"])  # fmt: skip
_chunks = st.recursive(
    _json,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(_chunks)
def test_any_json_decodes_to_a_piece_or_raises_stream_decode_error(value: Any) -> None:
    """Breaks if some well-formed JSON of the wrong shape raises anything but
    StreamDecodeError from a codec (the canary would log a crash, not a bad response)."""
    data = json.dumps(value)
    codecs = [
        GenerateCodec("vllm", "", DEFAULTS, inputs=VLLM_BACKEND),
        OpenAICodec("llama", DEFAULTS),
        OpenAICodec("llama", DEFAULTS, api="completions"),
    ]
    for codec in codecs:
        try:
            piece = codec.decode(data)
        except StreamDecodeError:
            continue
        assert isinstance(piece, Piece)
        assert piece.text is None or (isinstance(piece.text, str) and piece.text)
        assert piece.tokens is None or isinstance(piece.tokens, int)
        assert piece.error is None or isinstance(piece.error, str)


# -- gRPC ModelStreamInfer -----------------------------------------------------------------


def _request(encoded: bytes) -> Any:
    return service_pb2.ModelInferRequest.FromString(encoded)


def test_grpc_request_carries_id_inputs_and_the_empty_final_ask() -> None:
    """Breaks if the gRPC request loses its id (responses could not be told apart), an
    input's datatype, shape or bytes, or triton_enable_empty_final_response."""
    fields = StreamFields(parameters={"top_p": 0.5, "priority_hint": "low", "seed": 7})
    codec = GrpcStreamCodec("ensemble", "1", fields, inputs=TRTLLM_ENSEMBLE)
    request = _request(codec.encode("hé", 16, "tw-3"))
    assert (request.model_name, request.model_version, request.id) == ("ensemble", "1", "tw-3")
    assert [(i.name, i.datatype, list(i.shape)) for i in request.inputs] == [
        ("text_input", "BYTES", [1, 1]),
        ("max_tokens", "INT32", [1, 1]),
        ("stream", "BOOL", [1, 1]),
        ("top_p", "FP32", [1, 1]),
    ]
    assert list(request.raw_input_contents) == [
        struct.pack("<I", 3) + "hé".encode(),
        struct.pack("<i", 16),
        b"\x01",
        struct.pack("<f", 0.5),
    ]
    parameters = {name: request.parameters[name].WhichOneof("parameter_choice") for name in request.parameters}  # fmt: skip
    assert parameters == {
        "priority_hint": "string_param",
        "seed": "int64_param",
        "triton_enable_empty_final_response": "bool_param",
    }
    assert request.parameters["triton_enable_empty_final_response"].bool_param is True
    assert (request.parameters["seed"].int64_param, request.parameters["priority_hint"].string_param) == (7, "low")  # fmt: skip


def test_grpc_request_to_the_vllm_backend_sends_sampling_parameters() -> None:
    """Breaks if the vLLM backend's max_tokens stops going inside sampling_parameters."""
    request = _request(GrpcStreamCodec("vllm", "", DEFAULTS, inputs=VLLM_BACKEND).encode("a", 5, "x"))  # fmt: skip
    contents = dict(zip([i.name for i in request.inputs], request.raw_input_contents, strict=True))
    assert contents["sampling_parameters"][4:] == b'{"max_tokens": 5}'
    assert contents["return_num_output_tokens"] == b"\x01"


def _response(request_id: str, final: bool, token: bytes | None = None, error: str = "") -> Any:
    """A ModelStreamInferResponse as real Triton 2.51 sends it (the shapes
    tests/triton/test_generate_stream_real.py pins)."""
    message = service_pb2.ModelStreamInferResponse(error_message=error)
    response = message.infer_response
    response.model_name, response.id = "llm_stream", request_id
    response.parameters["triton_final_response"].bool_param = final
    if token is not None:
        response.model_version = "1"
        response.outputs.add(name="text_output", datatype="BYTES", shape=[1])
        response.raw_output_contents.append(struct.pack("<I", len(token)) + token)
    return message


def _read(codec: GrpcStreamCodec, message: Any) -> Piece:
    """``message`` as the canary reads it: serialized, parsed, decoded."""
    return codec.decode(codec.parse(message.SerializeToString()))


def test_grpc_responses_token_empty_final_and_error() -> None:
    """Breaks if a token response is not content, the empty final not the end, an
    in-band error_message not an error, or bytes that are no message pass as one."""
    codec = GrpcStreamCodec("llm_stream", "", DEFAULTS, inputs=LLM_STREAM)
    assert _read(codec, _response("a", False, b"token0")) == Piece("token0")
    assert _read(codec, _response("a", True)) == Piece(None, final=True)
    assert _read(codec, _response("a", True, error="fail_after: x")) == Piece(
        None, final=True, error="fail_after: x"
    )
    assert _read(codec, service_pb2.ModelStreamInferResponse()) == Piece(None)
    with pytest.raises(StreamDecodeError, match="not a ModelStreamInferResponse"):
        codec.parse(_response("a", True).SerializeToString()[:-1])


def test_grpc_counts_num_output_tokens_and_refuses_bad_contents() -> None:
    """Breaks if the vLLM backend's UINT32 num_output_tokens is not the piece's count,
    or contents that do not fit their datatype pass as a piece."""
    codec = GrpcStreamCodec("vllm", "", DEFAULTS, inputs=VLLM_BACKEND)
    message = _response("a", False, b"hi")
    message.infer_response.outputs.add(name="num_output_tokens", datatype="UINT32", shape=[1])
    message.infer_response.raw_output_contents.append(struct.pack("<I", 2))
    assert _read(codec, message) == Piece("hi", 2)
    message.infer_response.raw_output_contents[1] = b"\x02"
    with pytest.raises(StreamDecodeError, match="num_output_tokens"):
        _read(codec, message)
    message.infer_response.outputs[1].datatype = "UINT31"
    with pytest.raises(StreamDecodeError, match="unknown datatype"):
        _read(codec, message)


# -- prompts -------------------------------------------------------------------------------


def test_the_sampler_is_reproducible_and_keeps_to_its_ranges() -> None:
    """Breaks if the same seed stops giving the same requests, a length leaves its
    (min, max) or never reaches either end, or words come from outside the list."""
    first = PromptSampler(7, prompt_words=(2, 5), max_tokens=(10, 12))
    draws = [first.sample() for _ in range(300)]
    again = PromptSampler(7, prompt_words=(2, 5), max_tokens=(10, 12))
    assert [again.sample() for _ in range(300)] == draws
    assert {len(prompt.split()) for prompt, _ in draws} == {2, 3, 4, 5}
    assert {tokens for _, tokens in draws} == {10, 11, 12}
    assert {word for prompt, _ in draws for word in prompt.split()} <= set(WORDS)
    other = PromptSampler(8, prompt_words=(2, 5), max_tokens=(10, 12))
    assert [other.sample() for _ in range(300)] != draws


def test_the_sampler_with_fixed_values() -> None:
    """Breaks if a fixed prompt is not sent verbatim, or fixed lengths vary."""
    assert {PromptSampler(1, prompt="Tell me a story", max_tokens=64).sample() for _ in range(20)} == {("Tell me a story", 64)}  # fmt: skip
    sampler = PromptSampler(1, prompt_words=32, max_tokens=8)
    assert {(len(p.split()), n) for p, n in (sampler.sample() for _ in range(20))} == {(32, 8)}


@pytest.mark.parametrize("bad", [0, -1, (5, 4), (0, 3)])
def test_the_sampler_refuses_lengths_that_are_not_positive_ranges(bad: Any) -> None:
    """Breaks if an empty or inverted length range is accepted."""
    with pytest.raises(ValueError, match="positive int"):
        PromptSampler(1, max_tokens=bad)
    with pytest.raises(ValueError, match="prompt_words"):
        PromptSampler(1, prompt_words=bad)
