"""The stream sweep's transports below a stream: the keep-alive pool's streamed answers
and the ``ModelStreamInfer`` session, against scripted servers (no Triton).

The sweep's :class:`~tritonwatch.sweep.stream_transports.HttpStream` over these,
stream by stream, is tested beside the canary engine's streams in
tests/probe/test_stream_canary.py (the ``loop`` path).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

import pytest
from stream_script_support import ScriptedServer, in_loop, sse_answer

from tritonwatch.kserve.server_errors import ServerError
from tritonwatch.probe.canary.engine_http1 import encode_request
from tritonwatch.sweep.grpc_stream import GrpcStreamSession, StreamBrokenError
from tritonwatch.sweep.http_stream_pool import ConnectionPool


async def _read_all(pool: ConnectionPool, port: int) -> list[tuple[bytes, float]]:
    request = encode_request("POST", f"127.0.0.1:{port}", "/s", b"{}", {})
    async with contextlib.aclosing(pool.stream(request)) as reads:
        return [read async for read in reads]


@in_loop
async def test_a_stream_is_handed_on_read_by_read_and_its_connection_reused() -> None:
    """Breaks if stream bodies are handed on only at their end (TTFT would be the whole
    stream), or if a connection is not reused after a stream's terminal chunk."""
    answer = sse_answer([(0.0, '{"n":1}'), (0.05, '{"n":2}'), (0.05, '{"n":3}')])
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


@in_loop
async def test_a_stream_left_early_closes_its_connection() -> None:
    """Breaks if a connection whose stream was not read to its end goes back to the pool
    (the next stream would read the old one's bytes)."""
    answer = sse_answer([(0.0, '{"n":1}'), (0.05, '{"n":2}')])
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


@in_loop
async def test_a_refused_stream_raises_the_servers_error_from_its_sse_body() -> None:
    """Breaks if an error in the first response (Triton: that status with an SSE error
    body) is not a ServerError carrying the status and the server's message."""
    answer = sse_answer([(0.0, '{"error":"bad input"}')], status="400 Bad Request")
    async with ScriptedServer([answer]).running() as server:
        pool = ConnectionPool("127.0.0.1", server.port, None, 4)
        with pytest.raises(ServerError) as raised:
            await _read_all(pool, server.port)
        pool.close()
    assert str(raised.value) == "[400] bad input"


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


@in_loop
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
