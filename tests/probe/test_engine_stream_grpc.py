"""gRPC ``ModelStreamInfer`` streams from the canary engine against a scripted h2c server.

What real Triton (tests/probe/test_stream_canary_real.py) does not do on demand: pause
chosen times between responses, answer with a non-OK status, reset a call mid-stream.
The server speaks just enough HTTP/2 (SETTINGS, HEADERS in HPACK, DATA, trailers) for
the engine's :mod:`~tritonwatch.wire.http2`, one call at a time per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import hpack
import pytest
from engine_support import read_frame

from tritonwatch.config.canary_schema import StreamConfig
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.model_canary import ModelCanary
from tritonwatch.probe.canary.pauses import Pauses
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.stream.stream_canary import (
    TOO_LONG_FOR_GRPC,
    StreamSender,
    stream_senders,
)
from tritonwatch.records.observations import Outcome, StreamResult
from tritonwatch.state.canary_board import CanaryBoard
from tritonwatch.state.stream_board import StreamBoard
from tritonwatch.wire import http2
from tritonwatch.wire.datatypes import serialize_bytes
from tritonwatch.wire.http2 import frame_bytes

TEST_TIMEOUT_S = 30.0
Step = tuple[float, str]
"""(seconds to wait, then: a token's text, ``final``, ``error:MESSAGE``, ``status:N``
(trailers with that grpc-status), ``rst`` (RST_STREAM), ``TEXT+rst`` (a token and the
reset in one write, so one read) or ``close``)."""


def _response(request_id: str, text: str | None, *, final: bool = False,
              error: str = "") -> bytes:  # fmt: skip
    """A serialized ``ModelStreamInferResponse``: one BYTES token, or none."""
    from tritonclient.grpc import service_pb2

    message = service_pb2.ModelStreamInferResponse(error_message=error)
    response = message.infer_response
    response.id = request_id
    response.parameters["triton_final_response"].bool_param = final
    if text is not None:
        output = response.outputs.add()
        output.name, output.datatype = "text_output", "BYTES"
        output.shape.append(1)
        response.raw_output_contents.append(serialize_bytes([text.encode()]))
    data: bytes = message.SerializeToString()
    return data


@dataclass
class H2Server:
    """Serves each call with the next of ``scripts``; keeps the requests it was sent."""

    scripts: list[list[Step]]
    requests: list[Any] = field(default_factory=list)
    """Each call's ``ModelInferRequest``."""
    paths: list[str] = field(default_factory=list)
    served_on: list[int] = field(default_factory=list)
    connections: int = 0

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn, self.connections),
                             daemon=True).start()  # fmt: skip

    def _serve(self, conn: socket.socket, connection: int) -> None:
        with conn, contextlib.suppress(OSError):
            buffer, decoder = bytearray(), hpack.Decoder()
            while len(buffer) < len(http2.PREFACE):
                buffer += conn.recv(65536)
            del buffer[: len(http2.PREFACE)]
            conn.sendall(frame_bytes(http2.SETTINGS, 0, 0))
            encoder = hpack.Encoder()
            while (frame := read_frame(conn, buffer)) is not None:
                kind, flags, stream, payload = frame
                if kind == http2.HEADERS:
                    fields = dict(decoder.decode(payload))
                    self.paths.append(str(fields[":path"]))
                if kind != http2.DATA or not flags & http2.END_STREAM or not self.scripts:
                    continue
                self._call(conn, encoder, stream, payload, self.scripts.pop(0), connection)

    def _call(self, conn: socket.socket, encoder: hpack.Encoder, stream: int, payload: bytes,
              script: list[Step], connection: int) -> None:  # fmt: skip
        from tritonclient.grpc import service_pb2

        request = service_pb2.ModelInferRequest.FromString(payload[5:])
        self.requests.append(request)
        self.served_on.append(connection)
        head = encoder.encode([(":status", "200"), ("content-type", "application/grpc")])
        conn.sendall(frame_bytes(http2.HEADERS, http2.END_HEADERS, stream, head))
        for delay, step in script:
            time.sleep(delay)
            if step == "close":
                conn.shutdown(socket.SHUT_RDWR)
                return
            reset = frame_bytes(http2.RST_STREAM, 0, stream, struct.pack(">I", 2))
            if step == "rst":
                conn.sendall(reset)
                continue
            if step.startswith("status:"):
                trailers = encoder.encode([("grpc-status", step[7:]), ("grpc-message", "gone")])
                flags = http2.END_HEADERS | http2.END_STREAM
                conn.sendall(frame_bytes(http2.HEADERS, flags, stream, trailers))
                continue
            if step == "final":
                message = _response(request.id, None, final=True)
            elif step.startswith("error:"):
                message = _response(request.id, None, error=step[6:])
            else:
                message = _response(request.id, step.removesuffix("+rst"))
            data = struct.pack(">BI", 0, len(message)) + message
            after = reset if step.endswith("+rst") else b""
            conn.sendall(frame_bytes(http2.DATA, 0, stream, data) + after)

    def close(self) -> None:
        self._listener.close()


def _ok(*tokens: tuple[float, str]) -> list[Step]:
    """A call that streams ``tokens``, the empty final response, then OK trailers."""
    return [*tokens, (0.0, "final"), (0.0, "status:0")]


class _Llm:
    """The KServe client of a model with the TensorRT-LLM ensemble's text inputs."""

    protocol = "grpc"

    async def metadata(self, model: str, version: str) -> dict[str, Any]:
        return {"name": model, "inputs": [
            {"name": "text_input", "datatype": "BYTES", "shape": [1]},
            {"name": "max_tokens", "datatype": "INT32", "shape": [1]},
        ], "outputs": [{"name": "text_output", "datatype": "BYTES", "shape": [1]}]}  # fmt: skip

    async def config(self, model: str, version: str) -> dict[str, Any]:
        return {"name": model, "model_transaction_policy": {"decoupled": True}}

    async def close(self) -> None:
        pass


@contextlib.contextmanager
def _h2(scripts: list[list[Step]]) -> Iterator[H2Server]:
    server = H2Server(scripts)
    try:
        yield server
    finally:
        server.close()


def _plan(port: int, stream: StreamConfig) -> CanaryPlan:
    return CanaryPlan(
        target="t", model="llm", version="", protocol="grpc", http_url="http://127.0.0.1:1",
        grpc_url=f"grpc://127.0.0.1:{port}", rate=5.0, poisson=False, timeout=2.0,
        max_in_flight=1, data="random", stream=stream,
    )  # fmt: skip


def _stream(server: H2Server, count: int, *, timeout: float = 2.0) -> tuple[list[StreamResult],
                                                                             int]:  # fmt: skip
    """The first ``count`` streams of a gRPC canary on the engine; and how many it sent."""
    plan = _plan(server.port, StreamConfig(max_tokens=3, prompt="hello", timeout=timeout))
    results: list[StreamResult] = []

    class Recording(StreamBoard):
        def record(self, result: StreamResult) -> None:
            results.append(result)

    engine = CanaryEngine()

    async def main() -> None:
        pauses, stats = Pauses(), CanaryBoard()
        canary = ModelCanary(plan, _Llm(), stats, engine=engine,
                             streams=stream_senders(stats, Recording()), seed=1,
                             pauses=pauses)  # fmt: skip
        task = asyncio.create_task(canary.run())
        deadline = time.monotonic() + 15
        while len(results) < count and time.monotonic() < deadline:
            assert not task.done(), (task, stats.skipped())
            await asyncio.sleep(0.01)
        pauses.set(plan.target, plan.model, True, time.monotonic())
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert isinstance(canary.sender, StreamSender)  # the decoupled model's, from prepare

    try:
        asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT_S))
    finally:
        engine.stop()
    assert len(results) >= count, [r.error for r in results]
    return results[:count], engine.sent


def _summary(result: StreamResult) -> tuple[Outcome, int, int]:
    return result.outcome, result.output_tokens, len(result.gaps_seconds)


def test_grpc_streams_time_each_response_by_its_read_on_one_connection() -> None:
    """Breaks if the engine's gRPC stream times a response by anything but its read
    (TTFT under the server's 60 ms, a gap under its 50 ms), counts the empty final
    response as a token, calls another method, drops the request id, or opens a
    connection per stream (the second call must be stream 3 of the first)."""
    scripts = [_ok((0.06, "a"), (0.05, "b"), (0.05, "c")), _ok((0.0, "d"))]
    with _h2(scripts) as server:
        results, sent = _stream(server, 2)
    assert sent >= 2
    assert [_summary(r) for r in results] == [(Outcome.SUCCESS, 3, 2), (Outcome.SUCCESS, 1, 0)]
    first = results[0]
    assert first.ttft_seconds is not None and first.ttft_seconds >= 0.055
    assert min(first.gaps_seconds) >= 0.045, first.gaps_seconds
    assert server.paths[:2] == ["/inference.GRPCInferenceService/ModelStreamInfer"] * 2
    assert [r.id for r in server.requests] == ["tw-1", "tw-2"]
    assert [i.name for i in server.requests[0].inputs] == ["text_input", "max_tokens"]
    assert server.served_on == [1, 1]


@pytest.mark.parametrize(
    ("script", "expected", "error"),
    [
        ([(0.0, "a"), (0.01, "error:boom"), (0.0, "status:0")],
         (Outcome.GRPC_ERROR, 1, 0), "boom"),
        ([(0.0, "status:5")], (Outcome.GRPC_ERROR, 0, 0), "[StatusCode.NOT_FOUND] gone"),
        ([(0.0, "a"), (0.01, "rst")], (Outcome.CONNECTION_ERROR, 1, 0), "reset the call"),
        ([(0.0, "a"), (0.01, "b+rst")], (Outcome.CONNECTION_ERROR, 2, 1), "reset the call"),
        ([(0.0, "a"), (0.01, "close")], (Outcome.CONNECTION_ERROR, 1, 0), "closed"),
        ([(0.0, "a"), (5.0, "final")], (Outcome.TIMEOUT, 1, 0), "timeout"),
    ],
    ids=["in-band-error", "status", "reset", "reset-in-the-token's-read", "closed", "timeout"],
)  # fmt: skip
def test_a_failed_grpc_stream_keeps_its_tokens_and_the_next_one_goes_out(
    script: list[Step], expected: tuple[Outcome, int, int], error: str
) -> None:
    """Breaks if an in-band error, a non-OK status, a reset, a closed connection or
    ``stream.timeout`` reads as anything but its outcome, loses the tokens before it
    (those of the read that brought the reset too),
    or leaves the canary unable to stream next (a new connection where this one broke)."""
    with _h2([script, _ok((0.0, "z"))]) as server:
        results, _ = _stream(server, 2, timeout=0.4)
    assert [_summary(r) for r in results] == [expected, (Outcome.SUCCESS, 1, 0)]
    assert error in results[0].error, results[0].error
    reused = expected[0] == Outcome.GRPC_ERROR  # the call ended cleanly: its connection stays
    assert server.served_on == ([1, 1] if reused else [1, 2])


def test_a_grpc_stream_request_over_one_window_is_skipped_at_prepare() -> None:
    """Breaks if a ModelStreamInfer request larger than the 64 KiB window the engine's
    HTTP/2 sends at once gets a streaming sender (the engine cannot send it: every
    stream would fail) instead of being skipped at prepare with the reason on the board,
    or if a request that fits is skipped too."""
    stats, streams = CanaryBoard(), StreamBoard()
    sizes = {"long": "word " * (http2.MAX_REQUEST_DATA // 5), "short": "hello"}
    plans = {name: replace(_plan(1, StreamConfig(max_tokens=3, prompt=prompt)), model=name)
             for name, prompt in sizes.items()}  # fmt: skip
    stats.declare([plan.key for plan in plans.values()])
    prepared: dict[str, object] = {}
    for name, plan in plans.items():
        canary = ModelCanary(plan, _Llm(), stats, engine=CanaryEngine(),
                             streams=stream_senders(stats, streams), seed=1)  # fmt: skip
        prepared[name] = asyncio.run(asyncio.wait_for(canary.prepare(), TEST_TIMEOUT_S))
    assert prepared["long"] is None and isinstance(prepared["short"], StreamSender)
    assert stats.skipped() == {("t", "long", "grpc"): f"input 'canary.stream': {TOO_LONG_FOR_GRPC}"}
