"""The sweep's HTTP/2 gRPC client against a scripted HTTP/2 server and the simulator.

The scripted server answers each call from a real HPACK encoder, then drops the
connection, so the worker must open a new one before its next call instead of counting
a failure; the simulator (a real gRPC server) says NOT_FOUND for an unknown model.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from dataclasses import replace

import hpack
import pytest

import tritonwatch.sweep.worker as worker_module
from sim_process import SimProcess
from tritonwatch.kserve.payload import TensorSpec, build_inputs
from tritonwatch.records.sweep_records import LoadMode
from tritonwatch.sweep.pool import cut_all, start_workers, stop_workers
from tritonwatch.sweep.spec import LoadSpec, grpc_load_spec
from tritonwatch.sweep.worker import LoadWorker
from tritonwatch.wire.http2 import DATA, END_HEADERS, END_STREAM, HEADERS, SETTINGS, frame_bytes

pytestmark = pytest.mark.sim


async def _answer_once_then_close(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Reads frames until the client's request ends, answers it on its stream, closes."""
    try:
        await reader.readexactly(24)  # the client preface
        writer.write(frame_bytes(SETTINGS, 0, 0))
        while True:
            head = await reader.readexactly(9)
            length, kind, flags = int.from_bytes(head[:3], "big"), head[3], head[4]
            stream = struct.unpack_from(">I", head, 5)[0]
            await reader.readexactly(length)
            if kind == DATA and flags & END_STREAM:
                break
        encoder = hpack.Encoder()
        message = b"answer"
        writer.write(
            frame_bytes(HEADERS, END_HEADERS, stream, encoder.encode([(":status", "200")]))
            + frame_bytes(DATA, 0, stream, struct.pack(">BI", 0, len(message)) + message)
            + frame_bytes(HEADERS, END_HEADERS | END_STREAM, stream,
                          encoder.encode([("grpc-status", "0")]))
        )  # fmt: skip
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass  # the client hung up first
    finally:
        writer.close()  # never left for the garbage collector of a later test
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


def test_a_connection_the_server_closed_is_replaced_not_counted_as_a_failure() -> None:
    """Breaks if a call on a connection the server closed while idle counts as an error
    instead of going out on a new connection."""

    async def run() -> tuple[list[float], int, int]:
        server = await asyncio.start_server(_answer_once_then_close, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        worker = LoadWorker(
            LoadSpec("grpc", "127.0.0.1", port, b"ask", "concurrency", 1, timeout=2.0)
        )
        send, close = await worker._sender()
        accepted = []
        try:
            for _ in range(3):
                accepted.append(await send())
                await asyncio.sleep(0.05)  # the server's close arrives while idle
        finally:
            close()
            server.close()
            await server.wait_closed()
        return [1.0 for ok in accepted if ok], len(accepted), worker.cut().errors

    answered, sent, errors = asyncio.run(run())
    assert (len(answered), sent, errors) == (3, 3, 0)


@pytest.mark.parametrize(
    ("path", "mode"),
    [("h2", "concurrency"), ("h2", "rate"), ("library", "concurrency"), ("library", "rate")],
)
def test_an_unknown_model_is_counted_as_an_error_on_every_call(
    path: str, mode: LoadMode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Breaks if a non-OK gRPC status, on either path and either loop, is recorded as a
    latency sample or raised instead of counted."""
    if path == "library":  # as a request over 64 KiB would
        monkeypatch.setattr(worker_module, "h2_request", lambda spec: None)
    tensors = build_inputs("nope", [TensorSpec("INPUT0", "INT32", (1, 16))], {})
    spec = grpc_load_spec("grpc://127.0.0.1:1", "nope", "", tensors,
                          mode=mode, concurrency=2, rate=50.0)  # fmt: skip
    with SimProcess() as sim:
        spec = replace(spec, port=int(sim.grpc_url.rpartition(":")[2]))
        assert worker_module.uses_library(spec) is (path == "library")
        workers = start_workers(spec, processes=1)
        try:
            time.sleep(0.8)
            window = cut_all(workers)
        finally:
            stop_workers(workers)
    assert window.errors > 5
    assert (len(window.latencies), window.timeouts) == (0, 0)
