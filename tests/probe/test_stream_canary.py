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

from tritonwatch.canary_series import CanaryStats
from tritonwatch.config.schema import StreamConfig
from tritonwatch.observations import Outcome, StreamResult
from tritonwatch.probe.canary import CanaryPlan
from tritonwatch.probe.canary_http import ConnectionPool, encode_request
from tritonwatch.probe.grpc_stream import GrpcStreamSession, StreamBrokenError
from tritonwatch.probe.server_errors import ServerError
from tritonwatch.probe.stream_canary import StreamingCanary
from tritonwatch.stream_series import StreamStats

TEST_TIMEOUT_S = 30.0


def _in_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Runs an async test in a fresh event loop, bounded by :data:`TEST_TIMEOUT_S`."""

    @functools.wraps(test)
    def run() -> None:
        asyncio.run(asyncio.wait_for(test(), TEST_TIMEOUT_S))

    return run


Part = tuple[float, bytes]
"""(seconds to wait, bytes to write then)."""


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
    port: int = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length")), 0)  # fmt: skip
                self.requests.append(head + await reader.readexactly(length))
                for delay, data in self.answers.pop(0):
                    await asyncio.sleep(delay)
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
            yield self


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


class RecordingStreamStats(StreamStats):
    """StreamStats that keeps every result."""

    def __init__(self) -> None:
        super().__init__()
        self.results: list[StreamResult] = []

    def record(self, result: StreamResult) -> None:
        self.results.append(result)
        super().record(result)


def _chat(content: str | None, role: bool = False) -> str:
    delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {"content": content}
    return json.dumps(
        {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
    )


@pytest.mark.parametrize("root", ["", "/v1", "/v1/"])
def test_an_openai_canary_times_content_chunks_and_takes_the_usage_count(root: str) -> None:
    """Breaks if the OpenAI canary counts the role-only chunk as the first token, times
    gaps other than between content chunks, ignores the usage chunk's token count, or
    posts to /v1/v1/… when openai_url is given as OpenAI clients take it (…/v1)."""
    asyncio.run(asyncio.wait_for(_openai_canary_against_a_script(root), TEST_TIMEOUT_S))


async def _openai_canary_against_a_script(root: str) -> None:
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
        stats, streams = CanaryStats(), RecordingStreamStats()
        stats.declare([plan.key])
        streams.declare([plan.key])
        canary = StreamingCanary(plan, _NoKServe(), stats, streams, seed=1)
        task = asyncio.create_task(canary.run())
        deadline = time.monotonic() + 10
        while not streams.results and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
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
    assert [s.outcomes.get("success") for s in stats.snapshot(time.monotonic())] == [1]


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

    from tritonwatch.probe.canary_runner import CanaryRunner

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
    streams = StreamStats()
    runner = CanaryRunner(CanaryStats(), streams)
    try:
        runner.start(plans)
        kinds = {key[1]: type(canary).__name__ for key, canary in runner.running().items()}
        declared = {snap.model for snap in streams.snapshot(time.monotonic())}
    finally:
        runner.stop()
    assert kinds == {"auto": "ModelCanary", "on": "StreamingCanary", "chat": "StreamingCanary"}
    assert declared == {"on", "chat"}
