"""The canary against a real tritonserver 2.51, over HTTP and gRPC.

Real Triton compresses infer answers whenever the client's ``Accept-Encoding`` allows
(http_server.cc, GetResponseCompressionType); the simulator never did, so an HTTP canary
that inflated Triton's answers twice reported 100 % ``bad_response`` on a healthy model
and logged nothing. These tests hold the canary to what the real server does: every
answer of the ``batching`` identity model decodes to exactly what was sent, binary
tensors are chosen from the server's own ``GET /v2``, and a failing model says why in
its log lines and its stats.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from canary_support import RecordingClient, canary_plan
from structlog.testing import capture_logs

from real_triton import RealTriton
from tritonwatch.canary_series import CanaryStats, SeriesSnapshot
from tritonwatch.config.schema import InputOverride
from tritonwatch.observations import Outcome
from tritonwatch.probe.canary import BREAKER_FAILURES, CanaryPlan, ModelCanary
from tritonwatch.probe.clients import ACCEPT_ENCODING, client_for
from tritonwatch.probe.infer_response import decode_http_infer_response

pytestmark = pytest.mark.e2e
WAIT_SECONDS = 30.0


def _run(plan: CanaryPlan, results: int) -> tuple[SeriesSnapshot, ModelCanary, RecordingClient]:
    """Runs the canary (prepare, tensor format, sends) until ``results`` are recorded."""
    stats = CanaryStats()
    stats.declare([plan.key])

    async def go() -> tuple[ModelCanary, RecordingClient]:
        # Made inside the loop: grpc.aio binds its channel to the running loop.
        client = RecordingClient(client_for(plan.protocol, plan.http_url, plan.grpc_url))
        canary = ModelCanary(plan, client, stats, seed=1)
        task = asyncio.create_task(canary.run())
        try:
            async with asyncio.timeout(WAIT_SECONDS):
                while sum(stats.snapshot(0)[0].outcomes.values()) < results:
                    await asyncio.sleep(0.01)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await client.close()
        return canary, client

    canary, client = asyncio.run(go())
    return stats.snapshot(0)[0], canary, client


def _assert_echoed(client: RecordingClient, output: str) -> None:
    assert client.exchanges
    for tensors, result in client.exchanges:
        sent = tensors[0].data
        got = result.as_numpy(output)
        assert got.dtype == sent.dtype
        np.testing.assert_array_equal(got, sent)
        assert sent.any()  # random data, not zeros that any broken decoder would return


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_canary_reads_every_answer_of_a_healthy_model(
    real_triton: RealTriton, protocol: str
) -> None:
    """Breaks if the canary mis-reads real Triton's answers (over HTTP: inflating its
    gzipped answers a second time, "incorrect header check", 100 % bad_response)."""
    with capture_logs() as logs:
        snap, _canary, client = _run(canary_plan(real_triton, "batching", protocol), results=20)
    assert snap.outcomes[Outcome.SUCCESS] >= 20
    assert sum(snap.outcomes.values()) == snap.outcomes[Outcome.SUCCESS]
    assert snap.last_error is None
    _assert_echoed(client, "OUTPUT0")
    assert not [log for log in logs if log["event"] == "canary_request_failed"]
    started = [log for log in logs if log["event"] == "canary_started"]
    assert [log["tensors"] for log in started] == ["binary" if protocol == "http" else "grpc"]


def test_the_http_canary_sends_binary_tensors_because_triton_lists_the_extension(
    real_triton: RealTriton,
) -> None:
    """Breaks if the tensor format stops coming from GET /v2's extensions on real Triton."""
    status, body = real_triton.request("GET", "/v2")
    assert status == 200
    assert "binary_tensor_data" in json.loads(body)["extensions"]
    _, canary, client = _run(canary_plan(real_triton, "batching", "http"), results=3)
    assert canary.tensor_format == "binary"
    assert client.binary and all(client.binary)  # from the first request on


@pytest.mark.parametrize(
    ("accept", "expected"),
    [("gzip", "gzip"), ("deflate", "deflate"), (ACCEPT_ENCODING, "gzip"), (None, None)],
)
def test_triton_compresses_infer_answers_as_asked_and_each_decodes(
    real_triton: RealTriton, accept: str | None, expected: str | None
) -> None:
    """Breaks if Triton's Content-Encoding for an infer answer changes or one of them no
    longer decodes (the canary asks with ACCEPT_ENCODING: Triton picks gzip)."""
    data = np.arange(1, 33, dtype=np.float32).reshape(2, 16)
    tensor = httpclient.InferInput("INPUT0", [2, 16], "FP32")
    tensor.set_data_from_numpy(data, binary_data=True)
    body, header_length = httpclient.InferenceServerClient.generate_request_body([tensor])
    headers = {"Inference-Header-Content-Length": str(header_length)}
    if accept is not None:
        headers["Accept-Encoding"] = accept
    request = urllib.request.Request(
        f"{real_triton.http_url}/v2/models/batching/infer", body, headers, method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # urllib never inflates
        encoding = response.headers.get("Content-Encoding")
        length = response.headers.get("Inference-Header-Content-Length")
        payload = response.read()
    assert encoding == expected
    decoded = decode_http_infer_response(payload, length, encoding)
    np.testing.assert_array_equal(decoded.as_numpy("OUTPUT0"), data)


@pytest.mark.parametrize(
    ("protocol", "outcome", "status", "error"),
    [
        ("http", Outcome.HTTP_ERROR, 500, "[500] negative input: failure asked for"),
        ("grpc", Outcome.GRPC_ERROR, None, "[StatusCode.INTERNAL] negative input: failure asked"),
    ],
)
def test_a_failing_model_says_why_in_its_log_lines_and_its_stats(
    real_triton: RealTriton,
    tmp_path: Path,
    protocol: str,
    outcome: Outcome,
    status: int | None,
    error: str,
) -> None:
    """Breaks if canary failures go unlogged (the real flaky model fails every request
    that holds a negative value) or the log stops limiting itself to 3 whole lines."""
    sample = tmp_path / "negative.npy"
    np.save(sample, np.array([[-1, 0, 0, 0]], dtype=np.float32))
    plan = canary_plan(
        real_triton, "flaky", protocol, inputs={"INPUT0": InputOverride(file=sample)}
    )
    with capture_logs() as logs:
        snap, _, _ = _run(plan, results=BREAKER_FAILURES)  # then the breaker holds back
    failures = snap.outcomes[outcome]
    assert failures >= BREAKER_FAILURES
    assert snap.outcomes[Outcome.SUCCESS] == 0
    lines = [log for log in logs if log["event"] == "canary_request_failed"]
    assert len(lines) == 3
    for line in lines:
        assert {k: line[k] for k in ("target", "model", "protocol", "outcome")} == {
            "target": "triton",
            "model": "flaky",
            "protocol": protocol,
            "outcome": str(outcome),
        }
        assert line["error"].startswith(error)
        assert line.get("status") == status
        assert line["log_level"] == "warning"
    (suppressed,) = [log for log in logs if log["event"] == "canary_failures_suppressed"]
    assert suppressed["count"] == failures - 3  # written when the canary stopped
    assert suppressed["last_error"].startswith(error)
    assert snap.last_error is not None
    assert snap.last_error.outcome == str(outcome)
    assert snap.last_error.error.startswith(error)


def test_a_model_failing_at_random_is_logged_with_the_servers_reason(
    real_triton: RealTriton,
) -> None:
    """Breaks if a fail_ratio failure (successes in between) goes unlogged or unkept."""
    config = real_triton.config("flaky")
    # One in five: five failures in a row would open the circuit breaker (one probe per
    # 10 s) — at one in two that happens within 40 requests 47 % of the time.
    config["parameters"]["fail_ratio"] = {"string_value": "0.2"}
    real_triton.load("flaky", config)
    try:
        with capture_logs() as logs:
            snap, _, client = _run(canary_plan(real_triton, "flaky", "http"), results=40)
    finally:
        real_triton.reset("flaky")
    assert snap.outcomes[Outcome.SUCCESS] > 0
    assert snap.outcomes[Outcome.HTTP_ERROR] > 0
    _assert_echoed(client, "OUTPUT0")  # the successes among them
    lines = [log for log in logs if log["event"] == "canary_request_failed"]
    assert 1 <= len(lines) <= 3
    assert lines[0]["error"] == "[500] fail_ratio: failure asked for"
    assert lines[0]["status"] == 500
    assert snap.last_error is not None
    assert snap.last_error.error == "[500] fail_ratio: failure asked for"
