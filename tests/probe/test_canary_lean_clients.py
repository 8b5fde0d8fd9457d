"""The canary's lean infer path: bodies encoded once and as tritonclient encodes them,
sent by the engine on HTTP/1.1 keep-alive connections that are reused only after a
whole exchange.

The requests are built without numpy or tritonclient (wire/datatypes.py); tritonclient
(fed the same tensors as numpy arrays) is the reference they are held to byte for byte.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import hpack
import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient
from engine_support import Recorder, SteppedClock, until, wake
from tritonclient.grpc import service_pb2

from tritonwatch.kserve.binary_tensors import binary_request_body
from tritonwatch.kserve.encoded import encode_http_infer, grpc_infer_request
from tritonwatch.kserve.json_tensors import json_request_body
from tritonwatch.kserve.payload import DataMode, Tensor, TensorSpec, build_inputs
from tritonwatch.probe.canary import engine as engine_module
from tritonwatch.probe.canary.clients import client_for, http_infer_answer
from tritonwatch.probe.canary.encoded_requests import EncodedRequests
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.wire.datatypes import TRITON_DATATYPES
from tritonwatch.wire.http2 import DATA, HEADERS
from tritonwatch.wire.limits import DEFAULT_LIMITS

pytestmark = pytest.mark.real

TENSORS = [
    Tensor.from_numpy("a", "FP32", np.arange(16, dtype=np.float32).reshape(1, 16)),
    Tensor.from_numpy("b", "BYTES", np.array([[b"hi", b"\xff\x00", b""]], dtype=np.object_)),
    Tensor.from_numpy("c", "BF16", np.ones((2,), dtype=ml_dtypes.bfloat16)),
    Tensor.from_numpy("d", "BOOL", np.array([True, False])),
    Tensor.from_numpy("e", "INT64", np.array([[1, 2]], dtype=np.int64)),
    Tensor.from_numpy("f", "FP16", np.zeros((0, 3), dtype=np.float16)),
]


def _generated(mode: DataMode, **strings: Any) -> list[Tensor]:
    """What the canary builds for a model with one input of every datatype."""
    specs = [
        TensorSpec(f"in_{datatype}", datatype, (1, 3)) for datatype in sorted(TRITON_DATATYPES)
    ]
    return build_inputs("m", specs, {}, mode, seed=3, string_length=5, **strings)


GENERATED = {
    "random": _generated("random"),
    "zero": _generated("zero"),
    "string_data": _generated("random", string_data="Grüße, Triton?"),
}


def _tritonclient_body(tensors: list[Tensor]) -> tuple[bytes, int | None]:
    """tritonclient.http's binary request body for the tensors' numpy arrays."""
    inputs = []
    for tensor in tensors:
        infer_input = httpclient.InferInput(tensor.name, list(tensor.data.shape), tensor.datatype)
        infer_input.set_data_from_numpy(tensor.data, binary_data=True)
        inputs.append(infer_input)
    body, header_length = httpclient.InferenceServerClient.generate_request_body(inputs)
    return bytes(body), header_length


ALL_TENSOR_SETS = [TENSORS, TENSORS[:1], TENSORS[1:2], TENSORS[5:], *GENERATED.values()]


@pytest.mark.parametrize("tensors", ALL_TENSOR_SETS)
def test_the_binary_body_is_byte_for_byte_tritonclients(tensors: list[Tensor]) -> None:
    """Breaks if our binary-tensor encoder drifts from tritonclient.http's (header JSON,
    sizes, BYTES length prefixes, binary outputs asked for), for given arrays and for
    the canary's generated data (random, zero and string_data) of every datatype."""
    body, header_length = _tritonclient_body(tensors)
    ours, headers = binary_request_body(tensors)
    assert ours == body
    assert headers == {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(header_length),
    }


def _numpy_json_body(tensors: list[Tensor]) -> bytes:
    """The JSON body as the canary wrote it from numpy arrays before it dropped numpy."""
    inputs = []
    for tensor in tensors:
        flat = tensor.data.reshape(-1)
        if tensor.datatype == "BYTES":
            data: list[Any] = [item.decode("utf-8") for item in flat]
        elif tensor.datatype in ("FP16", "BF16"):
            data = flat.astype("float32").tolist()
        else:
            data = flat.tolist()
        shape = list(tensor.data.shape)
        inputs.append(
            {"name": tensor.name, "shape": shape, "datatype": tensor.datatype, "data": data}
        )
    return json.dumps({"inputs": inputs}).encode()


@pytest.mark.parametrize("tensors", [TENSORS[:1], TENSORS[2:], *GENERATED.values()])
def test_the_json_body_is_byte_for_byte_what_numpy_wrote(tensors: list[Tensor]) -> None:
    """Breaks if the JSON tensors (servers without binary_tensor_data) change: a float's
    digits, FP16/BF16 widened, booleans as numbers, BYTES not as UTF-8 text."""
    body, headers = json_request_body(tensors)
    assert body == _numpy_json_body(tensors)
    assert headers == {"Content-Type": "application/json"}


@pytest.mark.parametrize("tensors", ALL_TENSOR_SETS)
def test_the_sweeps_http_request_is_byte_for_byte_tritonclients(tensors: list[Tensor]) -> None:
    """Breaks if the sweep's pre-encoded HTTP request (now the canary's body, without
    tritonclient.http) differs in one byte from the one tritonclient.http made for it."""
    body, header_length = _tritonclient_body(tensors)
    head = (
        "POST /v2/models/m%20x/versions/2/infer HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n"
        "Connection: keep-alive\r\nContent-Type: application/octet-stream\r\n"
        f"Content-Length: {len(body)}\r\nInference-Header-Content-Length: {header_length}"
        "\r\n\r\n"
    )
    encoded = encode_http_infer("http://127.0.0.1:8000", "m x", "2", tensors)
    assert (encoded.host, encoded.port) == ("127.0.0.1", 8000)
    assert encoded.payload == head.encode() + body


@pytest.mark.parametrize("tensors", ALL_TENSOR_SETS)
def test_grpc_requests_carry_the_same_bytes_as_http(tensors: list[Tensor]) -> None:
    """Breaks if the gRPC request (tritonclient.grpc's builder, fed numpy arrays made from
    the tensors) sends other bytes, shapes or datatypes than the HTTP body does."""
    request = service_pb2.ModelInferRequest.FromString(grpc_infer_request("m", "", tensors))
    assert [(i.name, i.datatype, tuple(i.shape)) for i in request.inputs] == [
        (t.name, t.datatype, t.shape) for t in tensors
    ]
    assert list(request.raw_input_contents) == [t.raw for t in tensors]


def test_requests_are_encoded_once_per_model_and_again_for_new_tensors() -> None:
    """Breaks if the canary encodes every request again (0.1 ms each) or keeps sending an
    old body after its tensors were rebuilt (a reload)."""
    cache: EncodedRequests[bytes] = EncodedRequests()
    calls: list[str] = []

    def encode(tag: str) -> Callable[[], bytes]:
        return lambda: calls.append(tag) or tag.encode()

    first = [Tensor.from_numpy("x", "FP32", np.zeros(2, dtype=np.float32))]
    assert cache.get(("m", "", True), first, encode("a")) == b"a"
    assert cache.get(("m", "", True), list(first), encode("b")) == b"a"  # same tensors
    assert cache.get(("m", "", False), first, encode("c")) == b"c"  # JSON form: its own
    rebuilt = [Tensor.from_numpy("x", "FP32", np.zeros(2, dtype=np.float32))]  # equal, not same
    assert cache.get(("m", "", True), rebuilt, encode("d")) == b"d"
    assert calls == ["a", "c", "d"]


ANSWER = json.dumps(
    {"outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 1], "data": [7.0]}]}
).encode()
Handler = Callable[[int, asyncio.StreamWriter], Awaitable[None]]
GAP = 1.0
"""Seconds between the engine's sends, on its stepped clock."""
TIMEOUT = 0.5


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


class _Engine:
    """The HTTP canary client's own infer request sent by a :class:`CanaryEngine` on a
    stepped clock, one send every :data:`GAP`: the test moves the clock (:meth:`to`), so
    each send finds the connections exactly as the last exchange left them."""

    def __init__(self) -> None:
        self.clock = SteppedClock()
        self.engine = CanaryEngine(clock=self.clock)
        self.canary = Recorder(gap=GAP)
        self.first = self.clock.now + GAP

    async def to(self, at: float, done: Callable[[], bool], what: str) -> None:
        """Moves the engine's clock to ``at`` (seconds after the first send) and waits
        until ``done``."""
        self.clock.now = self.first + at
        wake(self.engine)
        await until(done, what)

    def outcomes(self) -> list[object]:
        """Each answer decoded as the canary decodes it (``y``), or its error's name."""
        outcomes: list[object] = []
        for _, answer in self.canary.answers:
            try:
                if isinstance(answer, BaseException):
                    raise answer
                assert isinstance(answer, tuple)
                outcomes.append(float(http_infer_answer(*answer).as_numpy("y")[0, 0]))
            except Exception as error:
                outcomes.append(type(error).__name__)
        return outcomes


def _on_engine(
    handler: Handler, script: Callable[[_Engine], Awaitable[None]]
) -> tuple[list[object], list[int]]:
    """Runs ``script`` with the engine sending the HTTP client's request to ``handler``'s
    server; what each request got, and how many requests each connection carried."""
    run = _Engine()

    async def body(url: str) -> None:
        client = client_for("http", url, "grpc://127.0.0.1:1")
        encoded = client.infer_request("m", "", TENSORS[:1], binary=False)
        request = client.wire_request(encoded, timeout=TIMEOUT, limits=DEFAULT_LIMITS)
        host, port, tls = client.engine_endpoint
        assert request is not None
        serving = asyncio.create_task(
            run.engine.serve(
                run.canary,
                host,
                port,
                request,
                timeout=TIMEOUT,
                max_in_flight=1,
                first_send=run.first,
                tls=tls,
            )
        )
        try:
            await script(run)
        finally:
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)
            await asyncio.to_thread(run.engine.stop)  # its connections closed: the server ends
            await client.close()

    async def main() -> list[int]:
        return await asyncio.wait_for(_serve(handler, body), timeout=30)

    try:
        connections = asyncio.run(main())
    finally:
        run.engine.stop()
    return run.outcomes(), connections


@pytest.fixture(autouse=True)
def _answers_read_as_they_come(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's clock is stepped, the kernel's stamps are real time: answers are
    read as they come and timed by the engine's clock (no wait for a collection that
    a clock standing still would never bring)."""
    monkeypatch.setattr(engine_module, "stamp_arrivals", lambda sock: False)


def test_requests_share_one_kept_alive_connection() -> None:
    """Breaks if the engine opens a connection per request for the client's requests (a
    handshake added to every latency) or reads one answer as two."""

    async def handler(_: int, writer: asyncio.StreamWriter) -> None:
        writer.write(_answer())

    async def script(run: _Engine) -> None:
        for k in range(3):
            await run.to(k * GAP, lambda k=k: len(run.canary.answers) == k + 1, f"answer {k + 1}")

    outcomes, connections = _on_engine(handler, script)
    assert outcomes == [7.0, 7.0, 7.0]
    assert connections == [3]


def test_a_connection_whose_answer_timed_out_is_never_reused() -> None:
    """Breaks if a timed-out exchange's connection is used again: its late answer, sent
    after the next request went out, would then be read as that request's."""
    release = asyncio.Event()

    async def handler(number: int, writer: asyncio.StreamWriter) -> None:
        if number == 1:
            await release.wait()  # answers after the engine gave up on it
            writer.write(_answer(ANSWER.replace(b"7.0", b"1.0")))
        else:
            writer.write(_answer())

    async def script(run: _Engine) -> None:
        canary = run.canary
        await run.to(0.0, lambda: len(canary.asked) == 1, "the first send")
        await run.to(TIMEOUT + 0.1, lambda: len(canary.answers) == 1, "the first's timeout")
        await run.to(GAP, lambda: len(canary.asked) == 2, "the second send")
        release.set()  # the first request's late answer goes out now
        await until(lambda: len(canary.answers) == 2, "the second answer")

    outcomes, connections = _on_engine(handler, script)
    assert outcomes == ["TimeoutError", 7.0]
    assert connections == [1, 1]


def test_an_answer_that_closes_the_connection_is_not_reused() -> None:
    """Breaks if the engine writes the next request to a connection the server said it
    closes (that request would fail as a connection error), even while the server has
    not closed it yet."""

    async def handler(_: int, writer: asyncio.StreamWriter) -> None:
        writer.write(_answer(extra="Connection: close\r\n"))  # and keeps it open

    async def script(run: _Engine) -> None:
        for k in range(2):
            await run.to(k * GAP, lambda k=k: len(run.canary.answers) == k + 1, f"answer {k + 1}")

    outcomes, connections = _on_engine(handler, script)
    assert outcomes == [7.0, 7.0]
    assert connections == [1, 1]


def test_the_http_canary_imports_neither_tritonclient_nor_numpy_nor_aiohttp() -> None:
    """Breaks if the canary's HTTP path pulls tritonclient (gevent, numpy, ml_dtypes:
    ~45 MiB together) or aiohttp back into the daemon, building or decoding."""
    code = (
        "import sys\n"
        "from tritonwatch.probe import runner\n"
        "from tritonwatch.kserve.infer_response import check_outputs, decode_http_infer_response\n"
        "from tritonwatch.kserve.payload import TensorSpec, build_inputs\n"
        "from tritonwatch.probe.canary.clients import client_for\n"
        "from tritonwatch.wire.limits import DEFAULT_LIMITS\n"
        "client = client_for('http', 'http://127.0.0.1:9', 'grpc://127.0.0.1:9')\n"
        "tensors = build_inputs('m', [TensorSpec('x', 'BF16', (1, 2))], {})\n"
        "client.encode_infer('m', '', tensors, binary=True)\n"
        "client.encode_infer('m', '', tensors, binary=False)\n"
        "encoded = client.infer_request('m', '', tensors, binary=True)\n"
        "client.wire_request(encoded, timeout=1.0, limits=DEFAULT_LIMITS)\n"
        'body = b\'{"outputs": [{"name": "y", "datatype": "FP16", "shape": [1],'
        ' "data": [1.5]}]}\'\n'
        "check_outputs(decode_http_infer_response(body), ['y'])\n"
        "print(sorted(m for m in sys.modules if m.startswith(('tritonclient', 'aiohttp',"
        " 'gevent', 'numpy', 'ml_dtypes'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_engines_grpc_call_carries_the_grpc_clients_message_and_deadline() -> None:
    """Breaks if the engine's gRPC call sends other bytes than the client's message, loses
    the deadline, goes elsewhere than the gRPC URL's address (in clear, or over TLS
    checking the host's name), or is built for a message that no fresh connection's
    flow-control window takes (the library path must send that one)."""

    async def built() -> tuple[Any, ...]:
        plain = client_for("grpc", "http://127.0.0.1:8000", "grpc://127.0.0.1:8001")
        secure = client_for("grpc", "https://127.0.0.1:8000", "grpcs://127.0.0.1:8001")
        big = [Tensor.from_numpy("a", "FP32", np.zeros((1, 20_000), dtype=np.float32))]

        def wire(tensors: list[Tensor]) -> Any:
            encoded = plain.infer_request("m", "2", tensors)
            return plain.wire_request(encoded, timeout=1.5, limits=DEFAULT_LIMITS)

        try:
            return plain.engine_endpoint, secure.engine_endpoint, wire(TENSORS), wire(big)
        finally:
            await plain.close()
            await secure.close()

    endpoint, (host, port, tls), call, too_big = asyncio.run(built())
    assert (endpoint, too_big) == (("127.0.0.1", 8001, None), None)
    assert (host, port, tls.server_name) == ("127.0.0.1", 8001, "127.0.0.1")
    assert tls.context.verify_mode == ssl.CERT_REQUIRED and tls.context.check_hostname
    frames = call.for_stream(1)
    head_length = int.from_bytes(frames[:3], "big")
    assert frames[3] == HEADERS
    headers = dict(hpack.Decoder().decode(frames[9 : 9 + head_length]))
    assert headers[":path"] == "/inference.GRPCInferenceService/ModelInfer"
    assert (headers[":authority"], headers["grpc-timeout"]) == ("127.0.0.1:8001", "1500m")
    data = frames[9 + head_length :]
    assert data[3] == DATA
    assert data[14:] == grpc_infer_request("m", "2", TENSORS)  # after the 5-byte gRPC prefix
