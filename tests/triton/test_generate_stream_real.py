"""What real Triton 2.51 sends a streaming client, pinned on ``tests/triton_models/llm_stream``.

The streaming canary's readers (wire/sse.py, kserve/stream_request.py) are written
against these facts (docs/plans/issue18.md A1, A2): HTTP ``generate_stream`` is a chunked
``text/event-stream`` with one ``data: {...}\\n\\n`` event per response and none for the
flag-only final; an error after the first token comes as an event under status 200;
``/generate`` refuses a model that answers more than once; gRPC ``ModelStreamInfer``
marks every response with ``triton_final_response`` and sends the flag-only final as an
empty response only when the request asks for it. The HTTP side is read off a raw socket
with a hand-written request, so nothing of ours stands between the test and the bytes;
the last tests then send our codecs' requests (kserve/stream_request.py) and check that a
keep-alive connection carries one stream after another, and pin that 2.51 has no
first-response histogram yet.
"""

from __future__ import annotations

import json
import queue
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from real_triton import HISTOGRAM_LATENCIES, RealTriton
from support import fixtures_dir
from tritonwatch.kserve.payload import input_specs
from tritonwatch.kserve.stream_request import GenerateCodec, GrpcStreamCodec, Piece, StreamFields
from tritonwatch.wire.http1 import ChunkedDecoder, response_head
from tritonwatch.wire.sse import SseParser

pytestmark = pytest.mark.real

MODEL = "llm_stream"
RECORDINGS = fixtures_dir() / "generate_stream"
_TIMEOUT_S = 30.0


def _post(server: RealTriton, path: str, body: dict[str, Any]) -> bytes:
    """The whole raw HTTP/1.1 answer to one POST (``Connection: close``: read to EOF)."""
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.http_port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
        "Connection: close\r\n\r\n"
    )
    answer = bytearray()
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=_TIMEOUT_S) as sock:
        sock.sendall(head.encode() + payload)
        deadline = time.monotonic() + _TIMEOUT_S
        while read := sock.recv(65536):
            answer += read
            if time.monotonic() > deadline:  # a wait that gave up
                raise AssertionError("the answer did not end")
    return bytes(answer)


def _split(answer: bytes) -> tuple[int, dict[str, str], list[bytes]]:
    """(status, headers, the chunks' payloads) of a chunked answer; asserts the framing,
    the terminal ``0`` chunk included, so nothing after it is left unread."""
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    assert headers["transfer-encoding"] == "chunked"
    chunks = []
    while True:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            assert body == b"\r\n", body
            return int(lines[0].split()[1]), headers, chunks
        chunks.append(body[:size])
        assert body[size : size + 2] == b"\r\n"
        body = body[size + 2 :]


def _token_event(index: int, request_id: str | None = None) -> bytes:
    """The event Triton writes for one ``text_output`` token of the test model."""
    fields = {"id": request_id} if request_id else {}
    fields |= {"model_name": MODEL, "model_version": "1", "text_output": f"token{index}"}
    return b"data: " + json.dumps(fields, separators=(",", ":")).encode() + b"\n\n"


@pytest.fixture
def failing_after(real_triton: RealTriton) -> Iterator[Any]:
    """Reloads ``llm_stream`` with ``fail_after`` set; puts the model back afterwards."""

    def reload(tokens: int) -> None:
        config = real_triton.config(MODEL)
        config["parameters"]["fail_after"] = {"string_value": str(tokens)}
        real_triton.load(MODEL, config)

    yield reload
    real_triton.reset(MODEL)


def test_generate_stream_sends_one_chunked_sse_event_per_token(real_triton: RealTriton) -> None:
    """Breaks if generate_stream stops being a chunked text/event-stream with one
    ``data:`` event per response (a one-element text_output as a JSON scalar), or starts
    writing an event for the flag-only final response."""
    answer = _post(real_triton, f"/v2/models/{MODEL}/generate_stream", {"text_input": "hi", "max_tokens": 3, "stream": True})  # fmt: skip
    status, headers, chunks = _split(answer)
    assert status == 200
    assert headers["content-type"] == "text/event-stream; charset=utf-8"
    assert chunks == [_token_event(i) for i in range(3)]
    assert json.loads(chunks[0].removeprefix(b"data: "))["text_output"] == "token0"


def test_nested_parameters_fill_inputs_and_id_is_echoed(real_triton: RealTriton) -> None:
    """Breaks if a ``max_tokens`` inside ``"parameters"`` stops filling the input of that
    name, or the request ``id`` stops coming back in every event."""
    body = {"text_input": "hi", "parameters": {"max_tokens": 2}, "id": "42"}
    status, _, chunks = _split(_post(real_triton, f"/v2/models/{MODEL}/generate_stream", body))
    assert status == 200
    assert chunks == [_token_event(0, "42"), _token_event(1, "42")]


def test_a_stream_of_no_tokens_is_an_empty_event_stream(real_triton: RealTriton) -> None:
    """Breaks if a request answered by the flag-only final alone stops being status 200
    with no event at all (the client learns the end from the terminal chunk only)."""
    answer = _post(real_triton, f"/v2/models/{MODEL}/generate_stream", {"text_input": "hi", "max_tokens": 0})  # fmt: skip
    status, headers, chunks = _split(answer)
    assert (status, chunks) == (200, [])
    assert headers["content-type"] == "text/event-stream; charset=utf-8"


def test_the_recorded_streams_are_what_the_server_sends(real_triton: RealTriton) -> None:
    """Breaks if tests/fixtures/generate_stream/llm_stream_4_tokens.http (fed to the
    decoders in tests/probe/test_stream_request.py) no longer matches the real bytes."""
    answer = _post(real_triton, f"/v2/models/{MODEL}/generate_stream", {"text_input": "hi", "max_tokens": 4, "stream": True})  # fmt: skip
    assert answer == (RECORDINGS / "llm_stream_4_tokens.http").read_bytes()


def test_an_error_after_the_first_token_is_an_event_under_status_200(
    real_triton: RealTriton, failing_after: Any
) -> None:
    """Breaks if a mid-stream error stops arriving as a ``data: {"error": ...}`` event
    after the tokens, under the 200 already sent, or an error in the first response
    stops setting the status (400, still an event stream)."""
    failing_after(2)
    answer = _post(real_triton, f"/v2/models/{MODEL}/generate_stream", {"text_input": "hi", "max_tokens": 4})  # fmt: skip
    assert answer == (RECORDINGS / "llm_stream_fail_after_2.http").read_bytes()
    status, headers, chunks = _split(answer)
    error = b'data: {"error":"fail_after: failure asked for after 2 tokens"}\n\n'
    assert (status, chunks) == (200, [_token_event(0), _token_event(1), error])
    failing_after(0)
    status, headers, chunks = _split(
        _post(real_triton, f"/v2/models/{MODEL}/generate_stream", {"text_input": "hi"})
    )
    assert (status, headers["content-type"]) == (400, "text/event-stream; charset=utf-8")
    assert chunks == [b'data: {"error":"fail_after: failure asked for after 0 tokens"}\n\n']


def test_generate_refuses_a_model_that_answers_more_than_once(real_triton: RealTriton) -> None:
    """Breaks if /generate stops refusing several responses (under status 200, as JSON)
    or stops answering a one-token request with one plain JSON object."""
    status, headers, chunks = _split(
        _post(real_triton, f"/v2/models/{MODEL}/generate", {"text_input": "hi", "max_tokens": 3})
    )
    assert (status, headers["content-type"]) == (200, "application/json")
    assert [json.loads(b"".join(chunks))] == [
        {
            "error": "generate expects model to produce exactly 1 response, use generate "
            "stream for model that generates various number of responses"
        }
    ]
    status, _, chunks = _split(
        _post(real_triton, f"/v2/models/{MODEL}/generate", {"text_input": "hi", "max_tokens": 1})
    )
    assert status == 200
    assert json.loads(b"".join(chunks)) == {
        "model_name": MODEL,
        "model_version": "1",
        "text_output": "token0",
    }


# -- gRPC ModelStreamInfer -----------------------------------------------------------------


def _request(request_id: str, tokens: int, *, empty_final: bool) -> service_pb2.ModelInferRequest:
    """A ``ModelStreamInfer`` request for ``tokens`` tokens, as a streaming client sends it."""
    request = service_pb2.ModelInferRequest(model_name=MODEL, id=request_id)
    request.inputs.add(name="text_input", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(struct.pack("<I", 2) + b"hi")
    request.inputs.add(name="max_tokens", datatype="INT32", shape=[1])
    request.raw_input_contents.append(struct.pack("<i", tokens))
    if empty_final:
        request.parameters["triton_enable_empty_final_response"].bool_param = True
    return request


class _Stream:
    """One bidirectional ``ModelStreamInfer`` call: requests go in one at a time; each
    read waits at most for the call's deadline."""

    def __init__(self, server: RealTriton) -> None:
        self._channel = grpc.insecure_channel(server.grpc_address)
        self._outgoing: queue.Queue[service_pb2.ModelInferRequest | None] = queue.Queue()
        stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        self._call = stub.ModelStreamInfer(iter(self._outgoing.get, None), timeout=_TIMEOUT_S)

    def send(self, request: service_pb2.ModelInferRequest) -> None:
        self._outgoing.put(request)

    def messages(self, count: int) -> list[Any]:
        """The next ``count`` ``ModelStreamInferResponse`` messages."""
        return [next(self._call) for _ in range(count)]

    def read(self, count: int) -> list[tuple[str, str, bool, str | None, str]]:
        """The next ``count`` messages as (id, version, final, text or None, error)."""
        messages = []
        for message in self.messages(count):
            response = message.infer_response
            text = None
            if response.raw_output_contents:
                assert [o.name for o in response.outputs] == ["text_output"]
                text = response.raw_output_contents[0][4:].decode()
            final = response.parameters["triton_final_response"].bool_param
            messages.append(
                (response.id, response.model_version, final, text, message.error_message)
            )
        return messages

    def close(self) -> list[object]:
        """Ends the request side; returns whatever else the server still sent."""
        self._outgoing.put(None)
        return list(self._call)

    def cancel(self) -> None:
        """Drops the call and its channel (a failed test must not leave it to the deadline)."""
        self._outgoing.put(None)
        self._call.cancel()
        self._channel.close()


@pytest.fixture
def open_stream(real_triton: RealTriton) -> Iterator[Any]:
    """Opens ``ModelStreamInfer`` calls on the shared server; cancels them at teardown."""
    streams: list[_Stream] = []

    def open_one() -> _Stream:
        streams.append(_Stream(real_triton))
        return streams[-1]

    yield open_one
    for stream in streams:
        stream.cancel()


def test_grpc_marks_every_response_and_sends_the_empty_final_only_on_request(
    open_stream: Any,
) -> None:
    """Breaks if ``triton_final_response`` stops marking each response, or the flag-only
    final stops coming as an empty response (no version, no output) exactly when the
    request set ``triton_enable_empty_final_response``."""
    stream = open_stream()
    stream.send(_request("a", 2, empty_final=True))
    assert stream.read(3) == [
        ("a", "1", False, "token0", ""),
        ("a", "1", False, "token1", ""),
        ("a", "", True, None, ""),
    ]
    # Without the parameter nothing says "b" ended: its tokens, then straight to "c".
    stream.send(_request("b", 2, empty_final=False))
    assert stream.read(2) == [("b", "1", False, "token0", ""), ("b", "1", False, "token1", "")]
    stream.send(_request("c", 1, empty_final=True))
    assert stream.read(2) == [("c", "1", False, "token0", ""), ("c", "", True, None, "")]
    assert stream.close() == []


def test_grpc_carries_a_mid_stream_error_in_band_and_stays_open(
    failing_after: Any, open_stream: Any
) -> None:
    """Breaks if a model error stops arriving in band as ``error_message`` (the output
    cleared, the response marked final, no gRPC status), or the stream stops serving the
    next request after it."""
    failing_after(1)
    stream = open_stream()
    stream.send(_request("a", 3, empty_final=True))
    assert stream.read(2) == [
        ("a", "1", False, "token0", ""),
        ("a", "", True, None, "fail_after: failure asked for after 1 tokens"),
    ]
    stream.send(_request("b", 1, empty_final=True))
    assert stream.read(2) == [("b", "1", False, "token0", ""), ("b", "", True, None, "")]
    assert stream.close() == []


def _codec_inputs(server: RealTriton) -> dict[str, Any]:
    """What the streaming canary reads before it sends: the model's inputs and outputs."""
    metadata = json.loads(server.request("GET", f"/v2/models/{MODEL}")[1])
    return {
        "inputs": input_specs(MODEL, metadata, server.config(MODEL)),
        "outputs": [output["name"] for output in metadata["outputs"]],
    }


def test_the_codecs_requests_are_what_the_server_takes(
    real_triton: RealTriton, open_stream: Any
) -> None:
    """Breaks if the generate or gRPC codec's request stops being one the real server
    streams max_tokens tokens for, or its answers stop decoding to those tokens."""
    model = _codec_inputs(real_triton)
    generate = GenerateCodec(MODEL, "", StreamFields(), **model)
    answer = _post(real_triton, generate.path, json.loads(generate.encode("hi there", 5)))
    head = response_head(answer)
    assert head is not None and head.status == 200
    decoder, parser = ChunkedDecoder(), SseParser()
    events = parser.feed(decoder.feed(answer[head.length :]), 0.0)
    assert decoder.done
    assert [generate.decode(e.data) for e in events] == [Piece(f"token{i}") for i in range(5)]

    codec = GrpcStreamCodec(MODEL, "", StreamFields(), **model)
    stream = open_stream()
    stream.send(service_pb2.ModelInferRequest.FromString(codec.encode("hi there", 3, "tw-1")))
    messages = stream.messages(4)
    assert {m.infer_response.id for m in messages} == {"tw-1"}
    assert [codec.decode(codec.parse(m.SerializeToString())) for m in messages] == [
        *(Piece(f"token{i}") for i in range(3)),
        Piece(None, final=True),
    ]


def _received(sock: socket.socket) -> bytes:
    """One read (the socket's timeout bounds the wait); the peer must not have closed."""
    read = sock.recv(65536)
    assert read, "the server closed the connection"
    return read


def test_a_keep_alive_connection_carries_stream_after_stream(real_triton: RealTriton) -> None:
    """Breaks if Triton closes a connection after a generate_stream answer, or sends
    anything after the terminal chunk (the canary reuses a connection once its
    ChunkedDecoder is done, and reads what is left over as the next answer)."""
    codec = GenerateCodec(MODEL, "", StreamFields(), **_codec_inputs(real_triton))
    body = codec.encode("hi", 2)
    request = (
        f"POST {codec.path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    with socket.create_connection(("127.0.0.1", real_triton.http_port), timeout=_TIMEOUT_S) as sock:
        for _ in range(2):
            sock.sendall(request)
            answer = bytearray()
            while (head := response_head(answer)) is None:
                answer += _received(sock)
            decoder, parser = ChunkedDecoder(), SseParser()
            events = parser.feed(decoder.feed(bytes(answer[head.length :])), 0.0)
            while not decoder.done:
                events += parser.feed(decoder.feed(_received(sock)), 0.0)
            assert "connection" not in head.headers
            assert decoder.leftover == b""
            assert [codec.decode(e.data) for e in events] == [Piece("token0"), Piece("token1")]


def test_triton_2_51_takes_histogram_latencies_but_has_no_first_response_histogram(
    real_triton: RealTriton,
) -> None:
    """Breaks when the test server learns nv_inference_first_response_histogram_ms (24.11,
    plan A5/B11): then tests that read it should be written against it; until then it is
    read from fixtures and the simulator only. tests/real_triton.py turns the flag on for
    every server, this one (the session's) included."""
    server = real_triton
    assert server.process is not None
    assert HISTOGRAM_LATENCIES in server.process.args
    _post(server, f"/v2/models/{MODEL}/generate_stream", {"text_input": "hi", "max_tokens": 2})
    with urllib.request.urlopen(server.metrics_url, timeout=_TIMEOUT_S) as page:
        families = {line.split()[2] for line in page.read().decode().splitlines() if line.startswith("# TYPE")}  # fmt: skip
    assert "nv_inference_request_success" in families
    assert not {family for family in families if "first_response" in family}
