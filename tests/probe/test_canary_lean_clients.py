"""The canary's lean infer path: bodies encoded once and as tritonclient encodes them,
HTTP/1.1 keep-alive connections that are reused only after a whole exchange."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient

from tritonwatch.probe.binary_tensors import binary_request_body
from tritonwatch.probe.clients import EncodedRequests, HttpInferenceClient
from tritonwatch.probe.payload import Tensor

TENSORS = [
    Tensor("a", "FP32", np.arange(16, dtype=np.float32).reshape(1, 16)),
    Tensor("b", "BYTES", np.array([[b"hi", b"\xff\x00", b""]], dtype=np.object_)),
    Tensor("c", "BF16", np.ones((2,), dtype=ml_dtypes.bfloat16)),
    Tensor("d", "BOOL", np.array([True, False])),
    Tensor("e", "INT64", np.array([[1, 2]], dtype=np.int64)),
    Tensor("f", "FP16", np.zeros((0, 3), dtype=np.float16)),
]


@pytest.mark.parametrize("tensors", [TENSORS, TENSORS[:1], TENSORS[1:2], TENSORS[5:]])
def test_the_binary_body_is_byte_for_byte_tritonclients(tensors: list[Tensor]) -> None:
    """Breaks if our binary-tensor encoder drifts from tritonclient.http's (header JSON,
    sizes, BYTES length prefixes, binary outputs asked for)."""
    inputs = []
    for tensor in tensors:
        infer_input = httpclient.InferInput(tensor.name, list(tensor.data.shape), tensor.datatype)
        infer_input.set_data_from_numpy(tensor.data, binary_data=True)
        inputs.append(infer_input)
    body, header_length = httpclient.InferenceServerClient.generate_request_body(inputs)
    ours, headers = binary_request_body(tensors)
    assert ours == bytes(body)
    assert headers == {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(header_length),
    }


def test_requests_are_encoded_once_per_model_and_again_for_new_tensors() -> None:
    """Breaks if the canary encodes every request again (0.1 ms each) or keeps sending an
    old body after its tensors were rebuilt (a reload)."""
    cache: EncodedRequests[bytes] = EncodedRequests()
    calls: list[str] = []

    def encode(tag: str) -> Callable[[], bytes]:
        return lambda: calls.append(tag) or tag.encode()

    first = [Tensor("x", "FP32", np.zeros(2, dtype=np.float32))]
    assert cache.get(("m", "", True), first, encode("a")) == b"a"
    assert cache.get(("m", "", True), list(first), encode("b")) == b"a"  # same tensors
    assert cache.get(("m", "", False), first, encode("c")) == b"c"  # JSON form: its own
    rebuilt = [Tensor("x", "FP32", np.zeros(2, dtype=np.float32))]  # equal, not the same
    assert cache.get(("m", "", True), rebuilt, encode("d")) == b"d"
    assert calls == ["a", "c", "d"]


ANSWER = json.dumps(
    {"outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 1], "data": [7.0]}]}
).encode()
Handler = Callable[[int, asyncio.StreamWriter], Awaitable[None]]


def _answer(body: bytes = ANSWER, extra: str = "") -> bytes:
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    return head.encode() + body


async def _serve(handler: Handler, body: Callable[[str], Awaitable[None]]) -> list[int]:
    """A loopback server calling ``handler(request number, writer)`` for each request it
    reads; returns how many requests each connection carried."""
    per_connection: list[int] = []
    count = 0

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal count
        per_connection.append(0)
        index = len(per_connection) - 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (int(line.split(b":")[1]) for line in head.split(b"\r\n")
                     if line.lower().startswith(b"content-length:")), 0,
                )  # fmt: skip
                await reader.readexactly(length)
                per_connection[index] += 1
                count += 1
                await handler(count, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        await body(f"http://127.0.0.1:{port}")
    return per_connection


def _infer_all(handler: Handler, timeouts: list[float]) -> tuple[list[object], list[int]]:
    """One infer per timeout, in order, on one client; what each returned or raised."""
    outcomes: list[object] = []

    async def body(url: str) -> None:
        client = HttpInferenceClient(url)
        try:
            for timeout in timeouts:
                try:
                    result = await client.infer("m", "", TENSORS[:1], binary=False, timeout=timeout)
                    outcomes.append(float(result.as_numpy("y")[0, 0]))
                except Exception as error:
                    outcomes.append(type(error).__name__)
        finally:
            await client.close()

    async def main() -> list[int]:
        return await asyncio.wait_for(_serve(handler, body), timeout=30)

    return outcomes, asyncio.run(main())


def test_requests_share_one_kept_alive_connection() -> None:
    """Breaks if the lean client opens a connection per request (a handshake added to
    every latency) or reads one answer as two."""

    async def handler(_: int, writer: asyncio.StreamWriter) -> None:
        writer.write(_answer())

    outcomes, connections = _infer_all(handler, [5.0, 5.0, 5.0])
    assert outcomes == [7.0, 7.0, 7.0]
    assert connections == [3]


def test_a_connection_whose_answer_timed_out_is_never_reused() -> None:
    """Breaks if a timed-out exchange's connection goes back to the pool: its late
    answer would then be read as the next request's."""

    async def handler(number: int, writer: asyncio.StreamWriter) -> None:
        if number == 1:
            await asyncio.sleep(0.5)  # answers after the client gave up
            writer.write(_answer(ANSWER.replace(b"7.0", b"1.0")))
        else:
            writer.write(_answer())

    outcomes, connections = _infer_all(handler, [0.1, 5.0])
    assert outcomes == ["TimeoutError", 7.0]
    assert connections == [1, 1]


def test_an_answer_that_closes_the_connection_is_not_reused() -> None:
    """Breaks if the client writes the next request to a connection the server said it
    closes (that request would fail as a connection error)."""

    async def handler(_: int, writer: asyncio.StreamWriter) -> None:
        writer.write(_answer(extra="Connection: close\r\n"))
        await writer.drain()
        writer.close()

    outcomes, connections = _infer_all(handler, [5.0, 5.0])
    assert outcomes == [7.0, 7.0]
    assert connections == [1, 1]


def test_the_http_canary_imports_neither_tritonclient_http_nor_aiohttp() -> None:
    """Breaks if the canary's HTTP path pulls tritonclient.http (gevent, ~30 MiB) or
    aiohttp back into the daemon."""
    code = (
        "import sys, numpy as np\n"
        "from tritonwatch.probe import canary_runner\n"
        "from tritonwatch.probe.clients import HttpInferenceClient\n"
        "from tritonwatch.probe.payload import Tensor\n"
        "client = HttpInferenceClient('http://127.0.0.1:9')\n"
        "client._encode('m', '', [Tensor('x', 'FP32', np.zeros(2, np.float32))], True)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('tritonclient.http', 'aiohttp',"
        " 'gevent'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
