"""The canary against a real Seldon MLServer 1.7.1: a KServe v2 server that is not Triton.

MLServer lists no extensions in ``GET /v2`` (no ``binary_tensor_data``), has no model
config API and reads only JSON tensors: a binary body is answered with 500 (FastAPI
fails to render the validation error of the non-UTF-8 body) and the connection is then
closed. The canary must read that from ``GET /v2`` and send JSON, and decode MLServer's
JSON answers to exactly what it sent (the ``echo`` model returns its input).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from canary_support import RecordingCanary, RecordingClient

from real_mlserver import ECHO_MODEL, RealMLServer
from support import wait_until
from tritonwatch.kserve.payload import Tensor
from tritonwatch.probe import runner as canary_runner
from tritonwatch.probe.canary.clients import client_for
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.runner import CanaryRunner
from tritonwatch.state.canary_board import CanaryBoard, SeriesSnapshot

pytestmark = pytest.mark.real

REQUESTS = 100
"""Canary results each protocol test waits for: ≥ 99 % success allows one failure."""
RATE = 25.0


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[RecordingCanary]:
    """Every canary the canary runner makes, a :class:`RecordingCanary` on a
    :class:`RecordingClient`: each answer decoded, with the tensors it was sent."""
    canaries: list[RecordingCanary] = []
    real: Callable[..., Any] = canary_runner.client_for

    def recording_client_for(*args: Any, **kwargs: Any) -> Any:
        return RecordingClient(real(*args, **kwargs))

    def recording_canary(*args: Any, **kwargs: Any) -> RecordingCanary:
        canary = RecordingCanary(*args, **kwargs)
        canaries.append(canary)
        return canary

    monkeypatch.setattr(canary_runner, "client_for", recording_client_for)
    monkeypatch.setattr(canary_runner, "ModelCanary", recording_canary)
    return canaries


def _exchanges(canaries: list[RecordingCanary]) -> list[tuple[list[Tensor], Any]]:
    return [exchange for canary in canaries for exchange in canary.exchanges()]


def _errors(canaries: list[RecordingCanary]) -> list[str]:
    return [
        f"{type(answer).__name__}: {answer}"
        for canary in canaries
        for _, answer in canary.judged
        if isinstance(answer, BaseException)
    ]


@pytest.fixture
def runner() -> Iterator[CanaryRunner]:
    runner = CanaryRunner(CanaryBoard())
    yield runner
    runner.stop()


def _plan(server: RealMLServer, protocol: str) -> CanaryPlan:
    return CanaryPlan(
        target="mlserver",
        model=ECHO_MODEL,
        version="",
        protocol=protocol,
        http_url=server.http_url,
        grpc_url=server.grpc_url,
        rate=RATE,
        poisson=False,
        timeout=2.0,
        max_in_flight=8,
        data="random",
    )


def _series(runner: CanaryRunner) -> SeriesSnapshot:
    (snap,) = runner.board.snapshot(time.monotonic())
    return snap


def _run_canary(runner: CanaryRunner, server: RealMLServer, protocol: str) -> SeriesSnapshot:
    """Runs the model's canary until it has REQUESTS results (or its circuit breaker
    opened: failing, it would only probe every 10 s), then stops it."""
    runner.start([_plan(server, protocol)])
    wait_until(
        lambda: sum(_series(runner).outcomes.values()) >= REQUESTS or runner.board.open_circuits(),
        timeout=REQUESTS / RATE + 30,
        what=f"{REQUESTS} {protocol} canary results from MLServer",
    )
    runner.stop()
    return _series(runner)


def _assert_echoed(canaries: list[RecordingCanary]) -> int:
    """Every decoded OUTPUT0 equals the INPUT0 that was sent; returns how many."""
    exchanges = _exchanges(canaries)
    for tensors, result in exchanges:
        (sent,) = tensors
        assert (sent.name, sent.datatype, sent.data.shape) == ("INPUT0", "FP32", (1, 16))
        answer = result.as_numpy("OUTPUT0")
        assert answer is not None
        assert answer.dtype == np.float32
        np.testing.assert_array_equal(answer, sent.data)
    return len(exchanges)


def _assert_mostly_successful(snap: SeriesSnapshot, canaries: list[RecordingCanary]) -> None:
    total = sum(snap.outcomes.values())
    errors = _errors(canaries)
    assert snap.outcomes.get("success", 0) >= 0.99 * total, (
        f"outcomes {snap.outcomes}; first errors: {errors[:3]}"
    )
    assert total >= REQUESTS, f"outcomes {snap.outcomes}; first errors: {errors[:3]}"


def _listening_addresses(port: int) -> set[str]:
    """The local addresses with a TCP socket in LISTEN on ``port`` (from /proc/net)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


LOOPBACK = {
    "0100007F",  # 127.0.0.1
    "0000000000000000FFFF00000100007F",  # ::ffff:127.0.0.1 (gRPC's dual-stack socket)
    "00000000000000000000000001000000",  # ::1
}


def test_mlserver_listens_on_loopback_only(real_mlserver: RealMLServer) -> None:
    """Breaks if the fixture lets MLServer bind its default 0.0.0.0 on any of its ports."""
    for port in real_mlserver.ports:
        addresses = _listening_addresses(port)
        assert addresses, f"nothing listens on {port}"
        assert addresses <= LOOPBACK, f"port {port} listens on {addresses}"


def test_mlserver_lists_no_binary_tensor_extension(real_mlserver: RealMLServer) -> None:
    """Breaks if MLServer starts advertising binary tensors (the canary would then send them)."""
    metadata = real_mlserver.json("/v2")
    assert metadata["name"] == "mlserver"
    assert metadata["version"] == "1.7.1"
    assert "binary_tensor_data" not in metadata["extensions"]
    model = real_mlserver.json(f"/v2/models/{ECHO_MODEL}")
    assert model["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]}]


def test_mlserver_answers_binary_tensors_with_500(real_mlserver: RealMLServer) -> None:
    """Breaks if MLServer's answer to Triton's binary tensor body changes from the 500 the
    canary met (a 400/415/422 refusal is what a per-request fallback would catch)."""
    header = json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                     "parameters": {"binary_data_size": 64}}]}
    ).encode()  # fmt: skip
    body = header + np.full((1, 16), 1.5, dtype=np.float32).tobytes()  # 0x3fc0…: not UTF-8
    request = urllib.request.Request(
        f"{real_mlserver.http_url}/v2/models/{ECHO_MODEL}/infer",
        data=body,
        method="POST",
        headers={"Inference-Header-Content-Length": str(len(header))},
    )
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=10)
    with raised.value:  # closes the answer's connection
        assert raised.value.code == 500
    status, answer = real_mlserver.request(
        "POST",
        f"/v2/models/{ECHO_MODEL}/infer",
        {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [1.5] * 16}]},
    )
    assert status == 200
    assert json.loads(answer)["outputs"][0]["data"] == [1.5] * 16


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_model_config_api_is_missing_and_reads_as_none(
    real_mlserver: RealMLServer, protocol: str
) -> None:
    """Breaks if the clients stop reading MLServer's 404 / UNIMPLEMENTED config as 'no
    config' (over gRPC: a target configured by its gRPC URL alone asks its model APIs
    there)."""

    async def config() -> Any:
        client = client_for(
            protocol, real_mlserver.http_url, real_mlserver.grpc_url, grpc_only=protocol == "grpc"
        )
        try:
            return await client.config(ECHO_MODEL, "")
        finally:
            await client.close()

    assert asyncio.run(config()) is None


def test_http_canary_succeeds_against_mlserver_and_outputs_equal_inputs(
    real_mlserver: RealMLServer, runner: CanaryRunner, recorded: list[RecordingCanary]
) -> None:
    """Breaks if the HTTP canary sends binary tensors to a server whose GET /v2 does not
    list binary_tensor_data (MLServer answers 500), or misreads its JSON answers."""
    snap = _run_canary(runner, real_mlserver, "http")
    _assert_mostly_successful(snap, recorded)
    assert _assert_echoed(recorded) >= 0.99 * REQUESTS


def test_grpc_canary_succeeds_against_mlserver_and_outputs_equal_inputs(
    real_mlserver: RealMLServer, runner: CanaryRunner, recorded: list[RecordingCanary]
) -> None:
    """Breaks if the gRPC canary fails on MLServer (no ModelConfig RPC) or misdecodes it."""
    snap = _run_canary(runner, real_mlserver, "grpc")
    _assert_mostly_successful(snap, recorded)
    assert _assert_echoed(recorded) >= 0.99 * REQUESTS
