"""Streams against a scripted loopback server (no Triton), from both places that send
them: the canary engine's thread (a :class:`ModelCanary` with the streaming senders,
probe/stream/stream_canary.py over probe/canary/engine_stream.py) and the stream
sweep's event loop (:class:`~tritonwatch.sweep.stream_transports.HttpStream`).

What a real server does not do on demand: send an OpenAI stream (no vLLM on a CPU
host; the simulator's OpenAI routes are tests/e2e/test_openai_sim_e2e.py's), split its
bytes at chosen places, refuse a stream with an SSE error body, or cut one short. The
real-server side is tests/probe/test_stream_canary_real.py; the runner's choice of a
streaming sender is tests/probe/test_stream_canary_runner.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass
from typing import Any

import pytest
from stream_real_support import RecordingStreamBoard
from stream_script_support import (
    CLOSE,
    END,
    HEAD_200,
    TEST_TIMEOUT_S,
    Part,
    ScriptedServer,
    chunk,
    event,
    sse_answer,
    tokens,
)

from tritonwatch.config.canary_schema import StreamConfig
from tritonwatch.probe.canary.clients import classify_error, error_text
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.engine_stream import StreamAnswer
from tritonwatch.probe.canary.model_canary import ModelCanary
from tritonwatch.probe.canary.pauses import Pauses
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.stream.stream_canary import (
    StreamSender,
    kserve_codec,
    openai_codec,
    openai_root,
    prompt_sampler,
    stream_fields,
    stream_requests,
    stream_senders,
)
from tritonwatch.probe.stream_timing import StreamClock
from tritonwatch.records.observations import Outcome, StreamResult
from tritonwatch.state.canary_board import CanaryBoard
from tritonwatch.sweep.stream_transports import HttpStream, open_transport

PATHS = ["loop", "engine"]
"""Where a plaintext HTTP stream is sent from: the stream sweep's event loop
(stream_transports.HttpStream) or the canary engine's thread (a ModelCanary's
StreamSender); each outcome must be the same on both."""


class _Llm:
    """The KServe client of a model with the TensorRT-LLM ensemble's text inputs."""

    protocol = "http"

    async def metadata(self, model: str, version: str) -> dict[str, Any]:
        return {"name": model, "inputs": [
            {"name": "text_input", "datatype": "BYTES", "shape": [1]},
            {"name": "max_tokens", "datatype": "INT32", "shape": [1]},
            {"name": "stream", "datatype": "BOOL", "shape": [1]},
        ], "outputs": [{"name": "text_output", "datatype": "BYTES", "shape": [1]}]}  # fmt: skip

    async def config(self, model: str, version: str) -> dict[str, Any]:
        return {"name": model, "model_transaction_policy": {"decoupled": True}}

    async def close(self) -> None:
        pass


class _NoKServe:
    """An OpenAI server has no KServe API: any call to it is a bug."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the OpenAI canary called the KServe client's {name}")


@dataclass
class Streamed:
    """What one scripted run of a stream canary (or of the sweep's transport) gave."""

    results: list[StreamResult]
    """The first streams' records, as many as asked for."""
    server: ScriptedServer
    requests: dict[str, int] | None
    """The canary's request series' outcomes (every stream counted as one request);
    None from the loop, which has no canary board."""
    ttft_count: int | None
    """TTFT observations in the canary's stream series (successful streams only)."""
    engine_sent: int


async def _on_engine(plan: CanaryPlan, client: Any, count: int) -> Streamed:
    """Runs ``plan``'s canary (a ModelCanary with the streaming senders, as the runner
    makes it) until ``count`` streams are recorded; ``Streamed.server`` is filled by
    the caller."""
    stats, streams = CanaryBoard(), RecordingStreamBoard()
    stats.declare([plan.key])
    streams.declare([plan.key])
    engine, pauses = CanaryEngine(), Pauses()
    canary = ModelCanary(plan, client, stats, engine=engine,
                         streams=stream_senders(stats, streams), seed=1, pauses=pauses)  # fmt: skip
    task = asyncio.create_task(canary.run())
    try:
        deadline = time.monotonic() + 15
        while len(streams.results) < count and time.monotonic() < deadline:
            assert not task.done(), (task, stats.skipped())
            await asyncio.sleep(0.01)
        pauses.set(plan.target, plan.model, True, time.monotonic())
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        engine.stop()
    assert isinstance(canary.sender, StreamSender)
    assert len(streams.results) >= count, [r.error for r in streams.results]
    [series] = stats.snapshot(time.monotonic())
    [stream_series] = streams.snapshot(time.monotonic())
    outcomes = {str(outcome): n for outcome, n in series.outcomes.items() if n}
    return Streamed(streams.results[:count], ScriptedServer([]), outcomes,
                    stream_series.ttft.count, engine.sent)  # fmt: skip


async def _from_the_loop(plan: CanaryPlan, transport: HttpStream, count: int) -> Streamed:
    """Sends ``count`` streams of ``plan`` on the sweep's ``transport`` as the canary
    schedules them (open loop: the k-th at ``start + k / rate``, timed from then, its
    deadline ``stream.timeout`` after), each recorded as the stream sweep records one."""
    sample = prompt_sampler(1, plan.stream).sample
    start = time.monotonic()

    async def one(intended: float) -> StreamResult:
        await asyncio.sleep(max(0.0, intended - time.monotonic()))
        prompt, max_tokens = sample()
        clock = StreamClock(intended)
        end: float | None = None
        failure: Outcome | None = None
        text = ""
        try:
            async with asyncio.timeout(intended + plan.stream.timeout - time.monotonic()):
                end = await transport.send(prompt, max_tokens, clock)
        except Exception as error:
            failure = classify_error(error, plan.protocol)
            text = error_text(error, timeout=plan.stream.timeout)
        return clock.result(target=plan.target, model=plan.model, protocol=plan.protocol,
                            at=time.monotonic(), end=end, failure=failure, error=text)  # fmt: skip

    try:
        results = await asyncio.gather(*(one(start + k / plan.rate) for k in range(count)))
    finally:
        await transport.close()
    return Streamed(list(results), ScriptedServer([]), None, None, 0)


def _transport(plan: CanaryPlan, url: str, codec: Any) -> HttpStream:
    """The stream sweep's transport for ``codec`` (one connection, as max_in_flight 1)."""
    transport = open_transport(url, plan.tls, plan.max_in_flight, codec)
    assert isinstance(transport, HttpStream)
    return transport


def _chat(content: str | None, role: bool = False) -> str:
    delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {"content": content}
    return json.dumps(
        {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
    )


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("root", ["", "/v1", "/v1/"])
def test_an_openai_stream_times_content_chunks_and_takes_the_usage_count(
    root: str, path: str
) -> None:
    """Breaks if an OpenAI stream (on either path) counts the role-only chunk as the
    first token, times gaps other than between content chunks, ignores the usage
    chunk's token count, or posts to /v1/v1/… when openai_url is given as OpenAI
    clients take it (…/v1)."""
    asyncio.run(asyncio.wait_for(_openai_against_a_script(root, path), TEST_TIMEOUT_S))


async def _openai_against_a_script(root: str, path: str) -> None:
    usage = json.dumps({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 7}})
    answer = sse_answer([
        (0.0, _chat(None, role=True)), (0.04, _chat("Hi")), (0.01, _chat(" there")),
        (0.01, _chat("!")), (0.0, usage), (0.0, "[DONE]"),
    ])  # fmt: skip
    async with ScriptedServer([answer]).running() as server:
        plan = CanaryPlan(
            target="v", model="llama", version="", protocol="openai",
            http_url="http://127.0.0.1:1", grpc_url="grpc://127.0.0.1:1", rate=50.0,
            poisson=False, timeout=2.0, max_in_flight=1, data="random",
            stream=StreamConfig(max_tokens=5, prompt="say hi"),
            openai_url=f"http://127.0.0.1:{server.port}{root}", served_name="meta/llama",
        )  # fmt: skip
        if path == "engine":
            streamed = await _on_engine(plan, _NoKServe(), 1)
        else:  # as the stream sweep opens it (stream_sweep.StreamSweepRunner._transport)
            assert plan.openai_url is not None
            codec = openai_codec(plan, stream_fields(plan.stream, plan.served_name))
            transport = _transport(plan, openai_root(plan.openai_url), codec)
            streamed = await _from_the_loop(plan, transport, 1)
    [result] = streamed.results
    assert (result.outcome, result.output_tokens, result.tokens_reported) == (
        Outcome.SUCCESS, 7, True)  # fmt: skip
    assert len(result.gaps_seconds) == 2
    assert result.ttft_seconds is not None and result.ttft_seconds >= 0.035
    body = json.loads(server.requests[0].partition(b"\r\n\r\n")[2])
    assert body == {"model": "meta/llama", "messages": [{"role": "user", "content": "say hi"}],
                    "max_tokens": 5, "stream": True,
                    "stream_options": {"include_usage": True}}  # fmt: skip
    assert server.requests[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert (streamed.engine_sent > 0) == (path == "engine")  # the path asked for sent it
    if streamed.requests is not None:  # (later streams find no answer left: not counted)
        assert streamed.requests.get("success") == 1


# -- generate_stream on both paths: the sweep's event loop and the canary's engine ----------
async def _stream_script(
    answers: list[list[Part]], path: str, *, count: int, timeout: float = 2.0,
    rate: float = 5.0, mode: str = "auto",
) -> Streamed:  # fmt: skip
    """Runs ``count`` generate_stream streams (at most one in flight) from ``path``
    against ``answers``."""
    async with ScriptedServer(answers).running() as server:
        plan = CanaryPlan(
            target="t", model="llm", version="", protocol="http",
            http_url=f"http://127.0.0.1:{server.port}", grpc_url="grpc://127.0.0.1:1",
            rate=rate, poisson=False, timeout=2.0, max_in_flight=1, data="random",
            stream=StreamConfig(mode=mode, max_tokens=3, prompt="hello", timeout=timeout),
        )  # fmt: skip
        if path == "engine":
            streamed = await _on_engine(plan, _Llm(), count)
        else:  # the codec as the sweep makes it from the model's metadata and config
            llm = _Llm()
            model = (await llm.metadata("llm", ""), await llm.config("llm", ""))
            codec = kserve_codec(plan, stream_fields(plan.stream, None), *model)
            transport = _transport(plan, plan.http_url, codec)
            streamed = await _from_the_loop(plan, transport, count)
    streamed.server = server
    return streamed


def _run(answers: list[list[Part]], path: str, **options: Any) -> Streamed:
    streamed = asyncio.run(asyncio.wait_for(_stream_script(answers, path, **options),
                                            TEST_TIMEOUT_S))  # fmt: skip
    assert (streamed.engine_sent > 0) == (path == "engine")  # the path asked for sent them
    return streamed


def _summary(result: StreamResult) -> tuple[Outcome, int, int, str]:
    return result.outcome, result.output_tokens, len(result.gaps_seconds), result.error


def _counted(streamed: Streamed, requests: dict[str, int], ttft: int) -> None:
    """The canary's boards (engine path) counted the streams so; the loop has none."""
    if streamed.requests is not None:
        assert (streamed.requests, streamed.ttft_count) == (requests, ttft)


@pytest.mark.parametrize("path", PATHS)
def test_generate_stream_times_every_token_by_its_read_and_reuses_the_connection(
    path: str,
) -> None:
    """Breaks if a path times a token by anything but the read that brought it (TTFT
    under the server's 60 ms, a gap under its 50 ms), stamps two events of one read
    apart, miscounts tokens or gaps, sends another body or route, or opens a second
    connection for the next stream."""
    merged = [(0.0, HEAD_200), (0.06, event("a")), (0.05, event("b") + event("c")),
              (0.0, END)]  # fmt: skip
    streamed = _run([tokens(0.06, 0.05, 0.05), merged], path, count=2)
    first, second = streamed.results
    assert [_summary(r) for r in streamed.results] == [(Outcome.SUCCESS, 3, 2, "")] * 2
    assert first.ttft_seconds is not None and first.ttft_seconds >= 0.055
    assert min(first.gaps_seconds) >= 0.045, first.gaps_seconds
    assert first.total_seconds is not None
    assert first.total_seconds >= first.ttft_seconds + sum(first.gaps_seconds)
    assert second.gaps_seconds[0] >= 0.045 and second.gaps_seconds[1] == 0.0  # one read
    assert streamed.server.served_on == [1, 1]
    request = streamed.server.requests[0]
    assert request.startswith(b"POST /v2/models/llm/generate_stream HTTP/1.1\r\n")
    body = json.loads(request.partition(b"\r\n\r\n")[2])
    assert body == {"text_input": "hello", "max_tokens": 3, "stream": True}
    _counted(streamed, {"success": 2}, 2)


def test_a_canary_with_streaming_on_sends_generate_stream_from_its_first_request() -> None:
    """Breaks if ``stream.mode: on`` on a KServe target does not stream generate_stream
    from the start (the model's metadata names its inputs): a skip, an OpenAI request,
    or a plain infer first."""
    streamed = _run([tokens(0.0)], "engine", count=1, mode="on")
    assert [_summary(r) for r in streamed.results] == [(Outcome.SUCCESS, 1, 0, "")]
    request = streamed.server.requests[0]
    assert request.startswith(b"POST /v2/models/llm/generate_stream HTTP/1.1\r\n")


@pytest.mark.parametrize("path", PATHS)
def test_a_mid_stream_error_fails_the_stream_keeps_its_tokens_and_the_connection(
    path: str,
) -> None:
    """Breaks if an in-band ``{"error"}`` under status 200 reads as a success, feeds
    TTFT, loses the tokens sent before it, or costs the connection (the body ended)."""
    failing = [(0.0, HEAD_200), (0.0, event("a")), (0.01, event("b")),
               (0.01, chunk(b'data: {"error":"boom"}\n\n')), (0.0, END)]  # fmt: skip
    streamed = _run([failing, tokens(0.0, 0.01)], path, count=2)
    assert [_summary(r) for r in streamed.results] == [
        (Outcome.HTTP_ERROR, 2, 1, "boom"), (Outcome.SUCCESS, 2, 1, "")]  # fmt: skip
    assert streamed.server.served_on == [1, 1]
    _counted(streamed, {"http_error": 1, "success": 1}, 1)


@pytest.mark.parametrize("path", PATHS)
def test_a_refused_stream_is_the_servers_error_and_its_connection_is_not_reused(
    path: str,
) -> None:
    """Breaks if a non-200 head is not an HTTP error with the SSE body's message, or if
    the refused stream's connection carries the next one."""
    refused = sse_answer([(0.0, '{"error":"bad input"}')], status="400 Bad Request")
    streamed = _run([refused, tokens(0.0)], path, count=2)
    assert [_summary(r) for r in streamed.results] == [
        (Outcome.HTTP_ERROR, 0, 0, "[400] bad input"), (Outcome.SUCCESS, 1, 0, "")]  # fmt: skip
    assert streamed.server.served_on == [1, 2]


@pytest.mark.parametrize("path", PATHS)
def test_a_refused_stream_whose_body_ends_with_its_connection_is_the_servers_error(
    path: str,
) -> None:
    """Breaks if a non-200 answer without a length (its body ends when the server
    closes) reads as a connection error instead of the server's error and status."""
    head = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n\r\n"
    refused = [(0.0, head), (0.0, b'{"error":"busy"}'), (0.01, CLOSE)]
    streamed = _run([refused, tokens(0.0)], path, count=2)
    assert [_summary(r) for r in streamed.results] == [
        (Outcome.HTTP_ERROR, 0, 0, "[503] busy"), (Outcome.SUCCESS, 1, 0, "")]  # fmt: skip


@pytest.mark.parametrize("path", PATHS)
def test_a_body_cut_short_is_a_connection_error_with_its_tokens_then_a_new_connection(
    path: str,
) -> None:
    """Breaks if a stream whose connection closed before the terminal chunk reads as a
    success, loses the token it got, or if the next stream does not reconnect."""
    cut = [(0.0, HEAD_200), (0.0, event("a")), (0.01, CLOSE)]
    streamed = _run([cut, tokens(0.0)], path, count=2)
    assert [_summary(r)[:3] for r in streamed.results] == [
        (Outcome.CONNECTION_ERROR, 1, 0), (Outcome.SUCCESS, 1, 0)]  # fmt: skip
    assert streamed.server.served_on == [1, 2]


@pytest.mark.parametrize("path", PATHS)
def test_a_stream_past_its_timeout_is_a_timeout_with_its_tokens(path: str) -> None:
    """Breaks if ``stream.timeout`` does not bound the whole stream (a server that
    stalls after one token), if the stalled stream loses that token, or if its
    connection is reused (the stalled answer would be read as the next one's)."""
    stalled = [(0.0, HEAD_200), (0.0, event("a")), (5.0, END)]
    streamed = _run([stalled, tokens(0.0)], path, count=2, timeout=0.3, rate=2.0)
    assert [_summary(r)[:3] for r in streamed.results] == [
        (Outcome.TIMEOUT, 1, 0), (Outcome.SUCCESS, 1, 0)]  # fmt: skip
    assert streamed.server.served_on == [1, 2]
    if streamed.requests is not None:
        assert streamed.requests == {"timeout": 1, "success": 1}


@pytest.mark.parametrize("path", PATHS)
def test_a_body_that_ends_inside_an_event_is_a_bad_response(path: str) -> None:
    """Breaks if an event the body ended before finishing is dropped silently (the
    stream would read as a success one token short)."""
    unfinished = [(0.0, HEAD_200), (0.0, event("a")),
                  (0.0, chunk(b'data: {"text_output":"b"}')), (0.0, END)]  # fmt: skip
    streamed = _run([unfinished], path, count=1)
    assert [_summary(r) for r in streamed.results] == [
        (Outcome.BAD_RESPONSE, 1, 0, "the stream ended inside an event")]  # fmt: skip


@pytest.mark.parametrize("path", PATHS)
def test_a_body_without_length_ends_with_its_connection(path: str) -> None:
    """Breaks if a 200 stream that is neither chunked nor sized (its end is the
    connection's) reads as a failure, or if its connection is used again."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    closing = [(0.0, head), (0.0, b'data: {"text_output":"a"}\n\n'),
               (0.01, b'data: {"text_output":"b"}\n\n'), (0.01, CLOSE)]  # fmt: skip
    streamed = _run([closing, tokens(0.0)], path, count=2)
    assert [_summary(r) for r in streamed.results] == [
        (Outcome.SUCCESS, 2, 1, ""), (Outcome.SUCCESS, 1, 0, "")]  # fmt: skip
    assert streamed.server.served_on == [1, 2]


@pytest.mark.parametrize("path", PATHS)
def test_streams_that_wait_for_the_one_connection_count_the_wait(path: str) -> None:
    """Breaks if streams queued behind a slow one are timed from their late send
    (coordinated omission) instead of from their intended time: their TTFT must grow."""
    slow = [tokens(0.15) for _ in range(6)]
    streamed = _run(slow, path, count=6, rate=20.0)
    assert [_summary(r) for r in streamed.results] == [(Outcome.SUCCESS, 1, 0, "")] * 6
    ttfts = [r.ttft_seconds or 0.0 for r in streamed.results]
    # A stream every 50 ms, one served per 150 ms: the sixth waited ~0.5 s more.
    assert ttfts[-1] > ttfts[0] + 0.3, ttfts
    assert streamed.server.served_on == [1] * 6


@dataclass(frozen=True)
class _Piece:
    """One decoded response of a stream (probe/stream_timing.StreamPiece)."""

    text: str | None = None
    tokens: int | None = None
    final: bool = False
    error: str | None = None


class _Books:
    """The canary's bookkeeping, as a stream's record asks it: nothing logged."""

    def failure_of(self, error: BaseException, outcome: Outcome, text: str) -> None:
        return None

    def tally(self, outcome: Outcome, failure: object) -> float:
        return 0.0


def test_a_stream_taken_up_late_is_timed_from_the_wake_its_lateness_apart() -> None:
    """Breaks if a stream the engine took up after its intended send is timed from the
    intended send: the client's own lateness would go into the server's TTFT and total,
    and the stream's ``send_lateness_seconds`` would read 0."""
    plan = CanaryPlan(
        target="t",
        model="m",
        version="",
        protocol="openai",
        http_url="http://127.0.0.1:1",
        grpc_url="grpc://127.0.0.1:1",
        rate=1.0,
        poisson=False,
        timeout=2.0,
        max_in_flight=1,
        data="random",
        openai_url="http://127.0.0.1:1/v1",
    )
    stats, streams = CanaryBoard(), RecordingStreamBoard()
    stats.declare([plan.key])
    streams.declare([plan.key])
    sender = StreamSender(plan, stats, streams, _Books(), stream_requests(plan, None, 1))
    clock = StreamClock(0.0)  # (its origin is the sender's to set)
    clock.piece(100.5, _Piece(text="a"))
    clock.piece(101.0, _Piece(text="b", final=True))
    sender.record(100.0, StreamAnswer(clock, 101.0, None), woke=100.25)
    [result] = streams.results
    assert result.outcome == Outcome.SUCCESS
    assert result.send_lateness_seconds == 0.25
    assert result.ttft_seconds == 0.25  # from the wake at 100.25 to the first token
    assert result.total_seconds == 0.75
