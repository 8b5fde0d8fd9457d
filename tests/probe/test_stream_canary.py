"""The streaming canary's transports against a scripted loopback server (no Triton).

What a real server does not do on demand: send an OpenAI stream (no vLLM on a CPU
host; the simulator's OpenAI routes are tests/e2e/test_openai_sim_e2e.py's), split its
bytes at chosen places, refuse a stream with an SSE error body, or break a gRPC call. The real-server side is
tests/probe/test_stream_canary_real.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from stream_real_support import RecordingStreamBoard

from tritonwatch.config.canary_schema import StreamConfig
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.engine_http import ConnectionPool, encode_request
from tritonwatch.probe.canary.pauses import Pauses
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.grpc_stream import GrpcStreamSession, StreamBrokenError
from tritonwatch.probe.server_errors import ServerError
from tritonwatch.probe.stream.stream_canary import StreamingCanary
from tritonwatch.records.observations import Outcome, StreamResult
from tritonwatch.state.canary_board import CanaryBoard
from tritonwatch.state.stream_board import StreamBoard

TEST_TIMEOUT_S = 30.0
PATHS = ["loop", "engine"]
"""Where a plaintext HTTP stream is sent from: the canary's event loop (HttpStream) or the
canary engine's thread (probe/canary/engine_stream.py); each outcome must be the same on both."""


def _in_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Runs an async test in a fresh event loop, bounded by :data:`TEST_TIMEOUT_S`."""

    @functools.wraps(test)
    def run() -> None:
        asyncio.run(asyncio.wait_for(test(), TEST_TIMEOUT_S))

    return run


Part = tuple[float, bytes]
"""(seconds to wait, bytes to write then)."""
CLOSE = b""
"""A part's bytes that close the connection instead (an answer cut short, or ended so)."""


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _sse_answer(events: Sequence[tuple[float, str]], status: str = "200 OK") -> list[Part]:
    """A chunked ``text/event-stream`` answer: each event its own chunk after its delay."""
    head = (f"HTTP/1.1 {status}\r\nContent-Type: text/event-stream\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()  # fmt: skip
    parts: list[Part] = [(0.0, head)]
    parts += [(delay, _chunk(f"data: {data}\n\n".encode())) for delay, data in events]
    return [*parts, (0.0, b"0\r\n\r\n")]


@dataclass
class ScriptedServer:
    """Answers every request on a connection with the next script of ``answers``."""

    answers: list[list[Part]]
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    served_on: list[int] = field(default_factory=list)
    """The connection (1, 2, …) each request came on, in the order of ``requests``."""
    port: int = 0
    _writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        self.connections += 1
        connection = self.connections
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length")), 0)  # fmt: skip
                self.requests.append(head + await reader.readexactly(length))
                self.served_on.append(connection)
                for delay, data in self.answers.pop(0):
                    await asyncio.sleep(delay)
                    if data == CLOSE:
                        return
                    writer.write(data)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ScriptedServer]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        async with server:
            try:
                yield self
            finally:
                await self._close_connections()

    async def _close_connections(self) -> None:
        """Every accepted connection closed before the loop ends (a transport left to
        the garbage collector warns of its socket, and the warning fails the test)."""
        for writer in self._writers:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)


async def _read_all(pool: ConnectionPool, port: int) -> list[tuple[bytes, float]]:
    request = encode_request("POST", f"127.0.0.1:{port}", "/s", b"{}", {})
    async with contextlib.aclosing(pool.stream(request)) as reads:
        return [read async for read in reads]


@_in_loop
async def test_a_stream_is_handed_on_read_by_read_and_its_connection_reused() -> None:
    """Breaks if stream bodies are handed on only at their end (TTFT would be the whole
    stream), or if a connection is not reused after a stream's terminal chunk."""
    answer = _sse_answer([(0.0, '{"n":1}'), (0.05, '{"n":2}'), (0.05, '{"n":3}')])
    async with ScriptedServer([answer, answer]).running() as server:
        pool = ConnectionPool("127.0.0.1", server.port, None, 4)
        first = await _read_all(pool, server.port)
        second = await _read_all(pool, server.port)
        pool.close()
    for reads in (first, second):
        body = b"".join(data for data, _ in reads)
        assert body == b'data: {"n":1}\n\ndata: {"n":2}\n\ndata: {"n":3}\n\n'
        stamps = [next(t for d, t in reads if f'"n":{n}'.encode() in d) for n in (1, 2, 3)]
        # The server pauses 50 ms before events 2 and 3 (on this same loop, so the
        # reads cannot merge): each event's read is stamped after its own pause.
        assert [b - a >= 0.045 for a, b in itertools.pairwise(stamps)] == [True, True], stamps
    assert server.connections == 1


@_in_loop
async def test_a_stream_left_early_closes_its_connection() -> None:
    """Breaks if a connection whose stream was not read to its end goes back to the pool
    (the next stream would read the old one's bytes)."""
    answer = _sse_answer([(0.0, '{"n":1}'), (0.05, '{"n":2}')])
    async with ScriptedServer([answer, answer]).running() as server:
        pool = ConnectionPool("127.0.0.1", server.port, None, 4)
        request = encode_request("POST", f"127.0.0.1:{server.port}", "/s", b"{}", {})
        async with contextlib.aclosing(pool.stream(request)) as reads:
            async for data, _ in reads:
                if data:
                    break
        assert b"".join(d for d, _ in await _read_all(pool, server.port)).count(b"data:") == 2
        pool.close()
    assert server.connections == 2


@_in_loop
async def test_a_refused_stream_raises_the_servers_error_from_its_sse_body() -> None:
    """Breaks if an error in the first response (Triton: that status with an SSE error
    body) is not a ServerError carrying the status and the server's message."""
    answer = _sse_answer([(0.0, '{"error":"bad input"}')], status="400 Bad Request")
    async with ScriptedServer([answer]).running() as server:
        pool = ConnectionPool("127.0.0.1", server.port, None, 4)
        with pytest.raises(ServerError) as raised:
            await _read_all(pool, server.port)
        pool.close()
    assert str(raised.value) == "[400] bad input"


def _chat(content: str | None, role: bool = False) -> str:
    delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {"content": content}
    return json.dumps(
        {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
    )


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("root", ["", "/v1", "/v1/"])
def test_an_openai_canary_times_content_chunks_and_takes_the_usage_count(
    root: str, path: str
) -> None:
    """Breaks if the OpenAI canary (on either path) counts the role-only chunk as the
    first token, times gaps other than between content chunks, ignores the usage
    chunk's token count, or posts to /v1/v1/… when openai_url is given as OpenAI
    clients take it (…/v1)."""
    asyncio.run(asyncio.wait_for(_openai_canary_against_a_script(root, path), TEST_TIMEOUT_S))


async def _openai_canary_against_a_script(root: str, path: str) -> None:
    usage = json.dumps({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 7}})
    answer = _sse_answer([
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
        stats, streams = CanaryBoard(), RecordingStreamBoard()
        stats.declare([plan.key])
        streams.declare([plan.key])
        engine = CanaryEngine() if path == "engine" else None
        try:
            canary = StreamingCanary(plan, _NoKServe(), stats, streams, seed=1, engine=engine)
            task = asyncio.create_task(canary.run())
            deadline = time.monotonic() + 10
            while not streams.results and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        finally:
            if engine is not None:
                engine.stop()
        assert (engine.sent > 0) if engine is not None else True  # it did stream from it
    [result] = streams.results[:1]
    assert (result.outcome, result.output_tokens, result.tokens_reported) == (
        Outcome.SUCCESS, 7, True)  # fmt: skip
    assert len(result.gaps_seconds) == 2
    assert result.ttft_seconds is not None and result.ttft_seconds >= 0.035
    body = json.loads(server.requests[0].partition(b"\r\n\r\n")[2])
    assert body == {"model": "meta/llama", "messages": [{"role": "user", "content": "say hi"}],
                    "max_tokens": 5, "stream": True,
                    "stream_options": {"include_usage": True}}  # fmt: skip
    assert server.requests[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    snapshots = stats.snapshot(time.monotonic())
    assert [s.outcomes.get("success") for s in snapshots] == [1]


class _NoKServe:
    """An OpenAI server has no KServe API: any call to it is a bug."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the OpenAI canary called the KServe client's {name}")


# -- the gRPC session, on a scripted call ---------------------------------------------------
class _Message:
    def __init__(self, request_id: str, text: str) -> None:
        self.infer_response = type("R", (), {"id": request_id})()
        self.text = text


class _Call:
    """A ``ModelStreamInfer`` call whose responses the test pushes (or breaks)."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._done = False

    async def write(self, data: bytes) -> None:
        self.written.append(data)

    def push(self, item: Any) -> None:
        self._queue.put_nowait(item)

    def done(self) -> bool:
        return self._done

    def cancel(self) -> None:
        self._done = True

    def __aiter__(self) -> _Call:
        return self

    async def __anext__(self) -> Any:
        item = await self._queue.get()
        if isinstance(item, BaseException):
            self._done = True
            raise item
        return item


class _Channel:
    def __init__(self) -> None:
        self.calls: list[_Call] = []

    def stream_stream(self, method: str, **_: Any) -> Any:
        assert method == "/inference.GRPCInferenceService/ModelStreamInfer"

        def open_call() -> _Call:
            self.calls.append(_Call())
            return self.calls[-1]

        return open_call

    async def close(self) -> None:
        pass


class _Codec:
    def encode(self, prompt: str, max_tokens: int, request_id: str) -> bytes:
        return f"{request_id}:{prompt}:{max_tokens}".encode()


@_in_loop
async def test_the_grpc_session_routes_responses_by_id_and_fails_all_on_a_break() -> None:
    """Breaks if interleaved responses reach the wrong request, if a broken call leaves
    requests waiting instead of failing them as connection errors, or if the next
    request does not open a new call."""
    channel = _Channel()
    session = GrpcStreamSession(channel, _Codec())
    one, first = await session.request("a", 1)
    two, second = await session.request("b", 2)
    call = channel.calls[0]
    assert (one, two, call.written) == ("tw-1", "tw-2", [b"tw-1:a:1", b"tw-2:b:2"])
    call.push(_Message("tw-2", "x"))
    call.push(_Message("tw-1", "y"))
    call.push(_Message("tw-9", "late"))  # a request that gave up: dropped
    got = [await asyncio.wait_for(q.get(), 5) for q in (first, second)]
    assert [message.text for _, message in got] == ["y", "x"]
    call.push(RuntimeError("UNAVAILABLE: the server went away"))
    failures = [await asyncio.wait_for(q.get(), 5) for q in (first, second)]
    assert all(isinstance(f, StreamBrokenError) for f in failures), failures
    assert "the server went away" in str(failures[0])
    three, _ = await asyncio.wait_for(session.request("c", 3), 5)  # after the backoff
    assert (three, len(channel.calls), session.opened) == ("tw-3", 2, 2)
    assert channel.calls[1].written == [b"tw-3:c:3"]
    await session.close()


def test_the_runner_streams_at_once_only_for_mode_on_and_openai(closed_url: str) -> None:
    """Breaks if ``stream.mode: on`` or protocol openai get the plain canary (which would
    send KServe infers), if ``auto`` streams before the model's config says decoupled,
    or if the streaming series are not declared for export."""
    from dataclasses import replace

    from tritonwatch.probe.runner import CanaryRunner

    base = CanaryPlan(
        target="t", model="auto", version="", protocol="http", http_url=closed_url,
        grpc_url="grpc://127.0.0.1:1", rate=1.0, poisson=False, timeout=1.0,
        max_in_flight=1, data="random",
    )  # fmt: skip
    plans = [
        base,
        replace(base, model="on", stream=StreamConfig(mode="on")),
        replace(base, model="chat", protocol="openai", openai_url=closed_url),
    ]
    streams = StreamBoard()
    runner = CanaryRunner(CanaryBoard(), streams)
    try:
        runner.start(plans)
        kinds = {key[1]: type(canary).__name__ for key, canary in runner.running().items()}
        declared = {snap.model for snap in streams.snapshot(time.monotonic())}
    finally:
        runner.stop()
    assert kinds == {"auto": "ModelCanary", "on": "StreamingCanary", "chat": "StreamingCanary"}
    assert declared == {"on", "chat"}


# -- generate_stream on both paths: the event loop's and the engine's ------------------------
HEAD_200 = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")  # fmt: skip
END = b"0\r\n\r\n"


def _event(text: str) -> bytes:
    """One generate_stream response as its own chunk."""
    return _chunk(f"data: {json.dumps({'text_output': text})}\n\n".encode())


def _tokens(*delays: float) -> list[Part]:
    """A 200 generate_stream answer: one token after each delay, then the terminal chunk."""
    return [(0.0, HEAD_200), *((d, _event(f"t{k}")) for k, d in enumerate(delays)), (0.0, END)]


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


@dataclass
class Streamed:
    """What one scripted run of a generate_stream canary gave."""

    results: list[StreamResult]
    """The first streams' records, as many as asked for."""
    server: ScriptedServer
    requests: dict[str, int]
    """The request series' outcomes (every stream counted as one request)."""
    ttft_count: int
    """TTFT observations in the stream series (successful streams only)."""
    engine_sent: int


async def _stream_script(
    answers: list[list[Part]], path: str, *, count: int, timeout: float = 2.0,
    rate: float = 5.0,
) -> Streamed:  # fmt: skip
    """Runs a generate_stream canary (at most one stream in flight) from ``path`` against
    ``answers`` until ``count`` streams are recorded."""
    async with ScriptedServer(answers).running() as server:
        plan = CanaryPlan(
            target="t", model="llm", version="", protocol="http",
            http_url=f"http://127.0.0.1:{server.port}", grpc_url="grpc://127.0.0.1:1",
            rate=rate, poisson=False, timeout=2.0, max_in_flight=1, data="random",
            stream=StreamConfig(max_tokens=3, prompt="hello", timeout=timeout),
        )  # fmt: skip
        stats, streams = CanaryBoard(), RecordingStreamBoard()
        stats.declare([plan.key])
        streams.declare([plan.key])
        engine = CanaryEngine() if path == "engine" else None
        pauses = Pauses()
        canary = StreamingCanary(plan, _Llm(), stats, streams, seed=1, engine=engine, pauses=pauses)
        task = asyncio.create_task(canary.run())
        try:
            deadline = time.monotonic() + 15
            while len(streams.results) < count and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            pauses.set(plan.target, plan.model, True, time.monotonic())
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if engine is not None:
                engine.stop()
    [series] = stats.snapshot(time.monotonic())
    [stream_board] = streams.snapshot(time.monotonic())
    assert len(streams.results) >= count, [r.error for r in streams.results]
    outcomes = {str(outcome): n for outcome, n in series.outcomes.items() if n}
    return Streamed(streams.results[:count], server, outcomes,
                    stream_board.ttft.count, engine.sent if engine else 0)  # fmt: skip


def _run(answers: list[list[Part]], path: str, **options: Any) -> Streamed:
    streamed = asyncio.run(asyncio.wait_for(_stream_script(answers, path, **options),
                                            TEST_TIMEOUT_S))  # fmt: skip
    assert (streamed.engine_sent > 0) == (path == "engine")  # the path asked for sent them
    return streamed


def _summary(result: StreamResult) -> tuple[Outcome, int, int, str]:
    return result.outcome, result.output_tokens, len(result.gaps_seconds), result.error


@pytest.mark.parametrize("path", PATHS)
def test_generate_stream_times_every_token_by_its_read_and_reuses_the_connection(
    path: str,
) -> None:
    """Breaks if a path times a token by anything but the read that brought it (TTFT
    under the server's 60 ms, a gap under its 50 ms), stamps two events of one read
    apart, miscounts tokens or gaps, sends another body or route, or opens a second
    connection for the next stream."""
    merged = [(0.0, HEAD_200), (0.06, _event("a")), (0.05, _event("b") + _event("c")),
              (0.0, END)]  # fmt: skip
    streamed = _run([_tokens(0.06, 0.05, 0.05), merged], path, count=2)
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
    assert (streamed.requests, streamed.ttft_count) == ({"success": 2}, 2)


@pytest.mark.parametrize("path", PATHS)
def test_a_mid_stream_error_fails_the_stream_keeps_its_tokens_and_the_connection(
    path: str,
) -> None:
    """Breaks if an in-band ``{"error"}`` under status 200 reads as a success, feeds
    TTFT, loses the tokens sent before it, or costs the connection (the body ended)."""
    failing = [(0.0, HEAD_200), (0.0, _event("a")), (0.01, _event("b")),
               (0.01, _chunk(b'data: {"error":"boom"}\n\n')), (0.0, END)]  # fmt: skip
    streamed = _run([failing, _tokens(0.0, 0.01)], path, count=2)
    assert [_summary(r) for r in streamed.results] == [
        (Outcome.HTTP_ERROR, 2, 1, "boom"), (Outcome.SUCCESS, 2, 1, "")]  # fmt: skip
    assert streamed.server.served_on == [1, 1]
    assert (streamed.requests, streamed.ttft_count) == ({"http_error": 1, "success": 1}, 1)


@pytest.mark.parametrize("path", PATHS)
def test_a_refused_stream_is_the_servers_error_and_its_connection_is_not_reused(
    path: str,
) -> None:
    """Breaks if a non-200 head is not an HTTP error with the SSE body's message, or if
    the refused stream's connection carries the next one."""
    refused = _sse_answer([(0.0, '{"error":"bad input"}')], status="400 Bad Request")
    streamed = _run([refused, _tokens(0.0)], path, count=2)
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
    streamed = _run([refused, _tokens(0.0)], path, count=2)
    assert [_summary(r) for r in streamed.results] == [
        (Outcome.HTTP_ERROR, 0, 0, "[503] busy"), (Outcome.SUCCESS, 1, 0, "")]  # fmt: skip


@pytest.mark.parametrize("path", PATHS)
def test_a_body_cut_short_is_a_connection_error_with_its_tokens_then_a_new_connection(
    path: str,
) -> None:
    """Breaks if a stream whose connection closed before the terminal chunk reads as a
    success, loses the token it got, or if the next stream does not reconnect."""
    cut = [(0.0, HEAD_200), (0.0, _event("a")), (0.01, CLOSE)]
    streamed = _run([cut, _tokens(0.0)], path, count=2)
    assert [_summary(r)[:3] for r in streamed.results] == [
        (Outcome.CONNECTION_ERROR, 1, 0), (Outcome.SUCCESS, 1, 0)]  # fmt: skip
    assert streamed.server.served_on == [1, 2]


@pytest.mark.parametrize("path", PATHS)
def test_a_stream_past_its_timeout_is_a_timeout_with_its_tokens(path: str) -> None:
    """Breaks if ``stream.timeout`` does not bound the whole stream (a server that
    stalls after one token), if the stalled stream loses that token, or if its
    connection is reused (the stalled answer would be read as the next one's)."""
    stalled = [(0.0, HEAD_200), (0.0, _event("a")), (5.0, END)]
    streamed = _run([stalled, _tokens(0.0)], path, count=2, timeout=0.3, rate=2.0)
    assert [_summary(r)[:3] for r in streamed.results] == [
        (Outcome.TIMEOUT, 1, 0), (Outcome.SUCCESS, 1, 0)]  # fmt: skip
    assert streamed.server.served_on == [1, 2]
    assert streamed.requests == {"timeout": 1, "success": 1}


@pytest.mark.parametrize("path", PATHS)
def test_a_body_that_ends_inside_an_event_is_a_bad_response(path: str) -> None:
    """Breaks if an event the body ended before finishing is dropped silently (the
    stream would read as a success one token short)."""
    unfinished = [(0.0, HEAD_200), (0.0, _event("a")),
                  (0.0, _chunk(b'data: {"text_output":"b"}')), (0.0, END)]  # fmt: skip
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
    streamed = _run([closing, _tokens(0.0)], path, count=2)
    assert [_summary(r) for r in streamed.results] == [
        (Outcome.SUCCESS, 2, 1, ""), (Outcome.SUCCESS, 1, 0, "")]  # fmt: skip
    assert streamed.server.served_on == [1, 2]


@pytest.mark.parametrize("path", PATHS)
def test_streams_that_wait_for_the_one_connection_count_the_wait(path: str) -> None:
    """Breaks if streams queued behind a slow one are timed from their late send
    (coordinated omission) instead of from their intended time: their TTFT must grow."""
    slow = [_tokens(0.15) for _ in range(6)]
    streamed = _run(slow, path, count=6, rate=20.0)
    assert [_summary(r) for r in streamed.results] == [(Outcome.SUCCESS, 1, 0, "")] * 6
    ttfts = [r.ttft_seconds or 0.0 for r in streamed.results]
    # A stream every 50 ms, one served per 150 ms: the sixth waited ~0.5 s more.
    assert ttfts[-1] > ttfts[0] + 0.3, ttfts
    assert streamed.server.served_on == [1] * 6
