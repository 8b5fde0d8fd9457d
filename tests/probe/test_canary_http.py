"""The HTTP canary (its client, its engine) against a small fake KServe v2 server on
loopback.

What no real server does on demand: answers compressed by hand (a gzip bomb among
them), and ``GET /v2`` that lists or lacks ``binary_tensor_data``, fails, or is no JSON.
The real-server side is tests/triton/test_canary_real_triton.py.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import struct
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest
from aiohttp import web
from structlog.testing import capture_logs

from engine_infer_support import engine_answer, engine_infer
from tritonwatch.kserve.infer_response import MAX_DECOMPRESSED_BYTES
from tritonwatch.kserve.payload import Tensor
from tritonwatch.probe.canary.clients import client_for
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.inference_client import InferenceClient
from tritonwatch.probe.canary.model_canary import ModelCanary
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.records.observations import Outcome
from tritonwatch.state.canary_board import CanaryBoard
from tritonwatch.wire.limits import AnswerTooLargeError

pytestmark = pytest.mark.real

METADATA = {
    "name": "m",
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 2]}],
}
ANSWER = json.dumps(
    {
        "model_name": "m",
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 2], "data": [1.5, 2.5]}],
    }
).encode()
INPUTS = [Tensor.from_numpy("x", "FP32", np.array([[1.5, 2.5]], dtype=np.float32))]


@dataclass
class FakeServer:
    """A KServe v2 server: ``server_metadata`` answers GET /v2, ``infer`` the infers."""

    server_metadata: Callable[[], web.Response]
    infer: Callable[[], web.Response] = lambda: web.Response(
        body=ANSWER, content_type="application/json"
    )
    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    """Headers and body of every infer request, in order."""
    url: str = ""

    async def _v2(self, _request: web.Request) -> web.Response:
        return self.server_metadata()

    async def _metadata(self, _request: web.Request) -> web.Response:
        return web.json_response(METADATA)

    async def _config(self, _request: web.Request) -> web.Response:
        return web.json_response({"detail": "Not Found"}, status=404)  # (FastAPI servers)

    async def _infer(self, request: web.Request) -> web.Response:
        self.requests.append((dict(request.headers), await request.read()))
        return self.infer()

    async def serve(self, body: Callable[[FakeServer], Awaitable[None]]) -> None:
        app = web.Application()
        app.add_routes([
            web.get("/v2", self._v2),
            web.get("/v2/models/m", self._metadata),
            web.get("/v2/models/m/config", self._config),
            web.post("/v2/models/m/infer", self._infer),
        ])  # fmt: skip
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        try:
            await body(self)
        finally:
            await runner.cleanup()


def _extensions(*names: str) -> Callable[[], web.Response]:
    return lambda: web.json_response({"name": "fake", "version": "1", "extensions": list(names)})


def _compressed(encoding: str, body: bytes) -> Callable[[], web.Response]:
    return lambda: web.Response(
        body=body, headers={"Content-Type": "application/json", "Content-Encoding": encoding}
    )


def _run(server: FakeServer, body: Callable[[FakeServer], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(server.serve(body), timeout=60))


def _client(server: FakeServer) -> InferenceClient:
    return client_for("http", server.url, "grpc://127.0.0.1:1")


async def _one_infer(server: FakeServer) -> Any:
    """One infer sent by the engine as the canary sends it, decoded as it decodes it."""
    client = _client(server)
    try:
        return await engine_infer(client, "m", "", INPUTS, binary=False, timeout=30)
    finally:
        await client.close()


# -- decompression: once, by the canary's decoder, within its limit ----------------------


@pytest.mark.parametrize(
    ("encoding", "packed"),
    [("gzip", gzip.compress(ANSWER)), ("deflate", zlib.compress(ANSWER))],
    ids=["gzip", "deflate"],
)
def test_a_compressed_answer_is_inflated_once(encoding: str, packed: bytes) -> None:
    """Breaks if anything inflates the body before the decoder does (real Triton's
    gzipped answers were then all bad_response: "incorrect header check")."""
    results: list[Any] = []

    async def body(server: FakeServer) -> None:
        results.append(await _one_infer(server))

    _run(FakeServer(_extensions(), infer=_compressed(encoding, packed)), body)
    np.testing.assert_array_equal(results[0].as_numpy("y"), [[1.5, 2.5]])


def test_infer_requests_offer_no_encoding() -> None:
    """Breaks if an infer request asks for compression (Triton then gzips every canary
    answer: server CPU, and an inflater per answer in the canary; perf_analyzer asks for
    none), in either tensor form."""
    server = FakeServer(_extensions())

    async def body(server: FakeServer) -> None:
        client = _client(server)
        try:
            for binary in (False, True):
                await engine_answer(client, "m", "", INPUTS, binary=binary, timeout=30)
        finally:
            await client.close()

    _run(server, body)
    assert len(server.requests) == 2
    assert "Inference-Header-Content-Length" in server.requests[1][0]  # binary tensors
    for headers, _ in server.requests:
        assert "Accept-Encoding" not in headers


def _gzip_bomb(inflated: int) -> bytes:
    """A valid gzip stream of ``inflated`` zero bytes (a multiple of 1 MiB), about 1000
    times smaller: after a full flush deflate repeats the same block for every MiB."""
    chunk = bytes(1 << 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    deflate.compress(chunk)
    deflate.flush(zlib.Z_FULL_FLUSH)
    block = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(inflated >> 20):
        crc = zlib.crc32(chunk, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"
    trailer = deflate.flush() + struct.pack("<II", crc, inflated & 0xFFFFFFFF)
    return header + block * (inflated >> 20) + trailer


def test_the_bomb_helper_makes_valid_gzip() -> None:
    """Breaks if the crafted stream is no gzip (the bomb test would then prove nothing)."""
    assert gzip.decompress(_gzip_bomb(3 << 20)) == bytes(3 << 20)


def test_a_gzip_bomb_is_refused_at_the_decoders_16_mib_limit() -> None:
    """Breaks if anything inflates an answer before the decoder does (aiohttp then holds
    the whole bomb in memory) or the decoder's limit (canary.limits.max_answer_bytes,
    16 MiB by default) stops holding."""
    assert MAX_DECOMPRESSED_BYTES == 16 << 20
    bomb = _gzip_bomb(MAX_DECOMPRESSED_BYTES + (1 << 20))
    assert len(bomb) < 2 << 20
    errors: list[BaseException] = []

    async def body(server: FakeServer) -> None:
        try:
            await _one_infer(server)
        except AnswerTooLargeError as error:
            errors.append(error)

    _run(FakeServer(_extensions(), infer=_compressed("gzip", bomb)), body)
    assert [str(e) for e in errors] == [
        "the gzip body inflates past 16 MiB, canary.limits.max_answer_bytes"
    ]


# -- binary or JSON tensors: what GET /v2 lists -------------------------------------------

PLAN = CanaryPlan("t", "m", "", "http", "", "grpc://127.0.0.1:1", 50.0, False, 5.0, 1, "zero")


def _canary_against(
    server: FakeServer, sends: int, engine: CanaryEngine | None = None, *, succeed: bool = True
) -> tuple[ModelCanary, list[dict[str, Any]]]:
    """Runs the canary (as the runner does: prepare, tensor format, sends) for ``sends``
    requests, from ``engine`` when given (else from one of its own, stopped after);
    returns it and its log lines."""
    outcome: list[ModelCanary] = []
    sender = engine if engine is not None else CanaryEngine()

    async def body(server: FakeServer) -> None:
        plan = replace(PLAN, http_url=server.url)
        stats = CanaryBoard()
        stats.declare([plan.key])
        client = _client(server)
        canary = ModelCanary(plan, client, stats, engine=sender)
        task = asyncio.create_task(canary.run())
        try:
            while len(server.requests) < sends:
                await asyncio.sleep(0.01)
            while sum(stats.snapshot(0)[0].outcomes.values()) < sends:
                await asyncio.sleep(0.01)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()
        if succeed:
            assert stats.snapshot(0)[0].outcomes[Outcome.SUCCESS] >= sends
        outcome.append(canary)

    try:
        with capture_logs() as logs:
            _run(server, body)
    finally:
        if engine is None:
            sender.stop()
    return outcome[0], logs


def _tensor_format(canary: ModelCanary) -> str:
    assert canary.sender is not None, "the canary was prepared"
    return canary.sender.tensor_format


def _is_plain_json(headers: dict[str, str], body: bytes) -> bool:
    """A KServe v2 JSON request with no Triton extension in it."""
    try:
        document = json.loads(body)
    except ValueError:  # binary tensors after the JSON header
        return False
    return (
        "Inference-Header-Content-Length" not in headers
        and "parameters" not in document
        and all("data" in tensor and "parameters" not in tensor for tensor in document["inputs"])
    )


def test_a_server_listing_binary_tensor_data_gets_binary_tensors() -> None:
    """Breaks if the extension Triton lists in GET /v2 stops selecting binary tensors."""
    server = FakeServer(_extensions("binary_tensor_data", "statistics"))
    canary, logs = _canary_against(server, sends=3)
    assert _tensor_format(canary) == "binary"
    assert all("Inference-Header-Content-Length" in h for h, _ in server.requests)
    started = [log for log in logs if log["event"] == "canary_started"]
    assert started[0]["tensors"] == "binary"


def _mlserver_like() -> web.Response:
    """Seldon MLServer answers a binary body with 500, as a broken model would."""
    return web.json_response({"error": "Internal Server Error"}, status=500)


@pytest.mark.parametrize(
    "server_metadata",
    [
        pytest.param(_extensions(), id="no-extensions"),
        pytest.param(_extensions("statistics", "model_repository"), id="others-only"),
        pytest.param(
            lambda: web.json_response({"name": "mlserver", "version": "1.7"}),
            id="no-extensions-key",
        ),
    ],
)
def test_a_server_lacking_binary_tensor_data_gets_json_from_the_first_request(
    server_metadata: Callable[[], web.Response],
) -> None:
    """Breaks if the canary tries binary first (MLServer answers it with 500, which no
    status rule can tell from a failing model)."""

    def answer() -> web.Response:
        headers, body = server.requests[-1]
        return (
            _mlserver_like()
            if not _is_plain_json(headers, body)
            else web.Response(body=ANSWER, content_type="application/json")
        )

    server = FakeServer(server_metadata, infer=answer)
    canary, logs = _canary_against(server, sends=3)
    assert _tensor_format(canary) == "json"
    assert all(_is_plain_json(h, b) for h, b in server.requests)
    assert json.loads(server.requests[0][1])["inputs"] == [
        {"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [0.0, 0.0]}
    ]
    assert not [log for log in logs if log["event"] == "canary_request_failed"]


@pytest.mark.parametrize(
    ("server_metadata", "outcome", "error"),
    [
        (lambda: web.json_response({"error": "blocked"}, status=403), "http_error", "[403] blocked"),
        (lambda: web.Response(text="<html>", content_type="text/html"), "bad_response", "no JSON"),
        (lambda: web.json_response({"extensions": "binary_tensor_data"}), "bad_response",
         "'extensions' is str"),
    ],
    ids=["forbidden", "not-json", "extensions-not-a-list"],
)  # fmt: skip
def test_without_a_readable_v2_the_canary_falls_back_to_json_and_says_so(
    server_metadata: Callable[[], web.Response], outcome: str, error: str
) -> None:
    """Breaks if an unreadable GET /v2 stops the canary, or it guesses binary anyway."""
    server = FakeServer(server_metadata)
    canary, logs = _canary_against(server, sends=2)
    assert _tensor_format(canary) == "json"
    assert all(_is_plain_json(h, b) for h, b in server.requests)
    (line,) = [log for log in logs if log["event"] == "canary_server_metadata_unavailable"]
    assert (line["outcome"], line["tensors"]) == (outcome, "json")
    assert error in line["error"]


def test_the_server_metadata_is_asked_once_per_client() -> None:
    """Breaks if every model's canary (or every request) asks GET /v2 again."""
    calls: list[int] = []

    def metadata() -> web.Response:
        calls.append(1)
        return _extensions("binary_tensor_data")()

    async def body(server: FakeServer) -> None:
        client = _client(server)
        try:
            assert await client.extensions() == {"binary_tensor_data"}
            assert await client.extensions() == {"binary_tensor_data"}
        finally:
            await client.close()

    _run(FakeServer(metadata), body)
    assert calls == [1]


# -- what the engine sends for the canary, and how the canary judges what it read -------


@pytest.fixture
def engine() -> Any:
    running = CanaryEngine()
    yield running
    running.stop()


@pytest.mark.parametrize("encoding", ["gzip", "deflate", None])
def test_the_engine_sends_the_clients_bytes_and_decodes_like_it(
    engine: CanaryEngine, encoding: str | None
) -> None:
    """Fails if the engine's requests differ from the client's (binary tensors, no
    Accept-Encoding) or its answers skip the client's decoder (a server that compresses
    unasked is still read)."""
    reply = (
        _compressed(
            encoding, gzip.compress(ANSWER) if encoding == "gzip" else zlib.compress(ANSWER)
        )
        if encoding
        else (lambda: web.Response(body=ANSWER, content_type="application/json"))
    )
    server = FakeServer(_extensions("binary_tensor_data"), infer=reply)
    canary, logs = _canary_against(server, sends=3, engine=engine)
    assert engine.sent == len(server.requests) >= 3
    assert _tensor_format(canary) == "binary"
    for headers, body in server.requests:
        assert "Accept-Encoding" not in headers
        assert int(headers["Inference-Header-Content-Length"]) < len(body)
    assert not [log for log in logs if log["event"] == "canary_request_failed"]


def test_through_the_engine_a_wrong_answer_is_a_bad_response_and_a_500_an_http_error(
    engine: CanaryEngine,
) -> None:
    """Fails if the engine's answers are not judged as the client's decoder reads them:
    an answer lacking the model's output is bad_response, a 500 is http_error with its
    status."""
    answers = iter(
        [
            web.Response(body=b'{"outputs": []}', content_type="application/json"),
            web.json_response({"error": "model failed"}, status=500),
        ]
    )

    def infer() -> web.Response:
        return next(answers, web.Response(body=ANSWER, content_type="application/json"))

    server = FakeServer(_extensions(), infer=infer)
    _canary, logs = _canary_against(server, sends=3, engine=engine, succeed=False)
    assert engine.sent >= 3
    failed = [log for log in logs if log["event"] == "canary_request_failed"]
    assert [(log["outcome"], log.get("status")) for log in failed] == [
        ("bad_response", None),
        ("http_error", 500),
    ]
    assert "model failed" in failed[1]["error"]
