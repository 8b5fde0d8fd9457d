"""The canary against a real tritonserver 2.51, over HTTP and gRPC.

Real Triton compresses infer answers whenever the client's ``Accept-Encoding`` allows
(http_server.cc, GetResponseCompressionType); the simulator never did, so an HTTP canary
that inflated Triton's answers twice reported 100 % ``bad_response`` on a healthy model
and logged nothing. These tests hold the canary to what the real server does: every
answer of the ``batching`` identity model decodes to exactly what was sent, binary
tensors are chosen from the server's own ``GET /v2``, and a failing model says why in
its log lines and its stats. The daemon's canaries send from the select-loop engine
(probe/canary/engine.py, gRPC over its own HTTP/2); the library path
(probe/canary/library_path.py: ``urllib3``, ``grpcio``) sends what the engine cannot:
the tests run on both paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from canary_support import RecordingCanary, RecordingClient, canary_plan
from structlog.testing import capture_logs
from tritonclient.utils import InferenceServerException

from engine_infer_support import library_infer
from real_triton import RealTriton
from tritonwatch.config.canary_schema import InputOverride
from tritonwatch.kserve.infer_response import decode_http_infer_response
from tritonwatch.kserve.payload import Tensor
from tritonwatch.probe.canary.breaker import BREAKER_FAILURES
from tritonwatch.probe.canary.clients import classify_error, client_for, error_text
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.pauses import Pauses
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.canary.unary import UnarySender
from tritonwatch.records.observations import Outcome
from tritonwatch.state.canary_board import CanaryBoard, SeriesSnapshot

pytestmark = pytest.mark.real
WAIT_SECONDS = 30.0
OFFERED_ENCODINGS = "gzip, deflate"
"""What an HTTP client library offers by default (``requests``, ``urllib3``)."""


@dataclass
class Run:
    """What one canary run left: its statistics and what it sent and got."""

    snap: SeriesSnapshot
    canary: RecordingCanary
    exchanges: list[tuple[list[Tensor], Any]]
    """Each answer (decoded) with the tensors of its request."""
    binary: list[bool]
    """Whether each request the client encoded was binary."""
    engine_sent: int
    """Requests the engine sent (0: the library path sent every one)."""


def _run(plan: CanaryPlan, results: int, *, engine: bool = True, settle: bool = False) -> Run:
    """Runs the canary (prepare, tensor format, sends) until ``results`` are recorded:
    from a :class:`CanaryEngine`, as the daemon's do, or (``engine`` False) through the
    library path. ``settle``: then pauses it and waits for the answers of those sent."""
    stats = CanaryBoard()
    stats.declare([plan.key])
    sender = CanaryEngine()

    def recorded() -> int:
        return sum(stats.snapshot(0)[0].outcomes.values())

    async def go() -> tuple[RecordingCanary, RecordingClient]:
        inner = client_for(plan.protocol, plan.http_url, plan.grpc_url)
        client = RecordingClient(inner, engine=engine)
        pauses = Pauses()
        canary = RecordingCanary(plan, client, stats, seed=1, engine=sender, pauses=pauses)
        task = asyncio.create_task(canary.run())
        try:
            async with asyncio.timeout(WAIT_SECONDS):
                while recorded() < results:
                    await asyncio.sleep(0.01)
                if settle:
                    pauses.set(plan.target, plan.model, True, 0.0)
                    while recorded() < len(canary.allowed):
                        await asyncio.sleep(0.01)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await inner.close()
        return canary, client

    try:
        canary, client = asyncio.run(go())
    finally:
        sender.stop()
    binary = [form for _, form in client.encoded]
    return Run(stats.snapshot(0)[0], canary, canary.exchanges(), binary, sender.sent)


def _assert_echoed(exchanges: list[tuple[list[Tensor], Any]], output: str) -> None:
    assert exchanges
    for tensors, result in exchanges:
        sent = tensors[0].data
        got = result.as_numpy(output)
        assert got.dtype == sent.dtype
        np.testing.assert_array_equal(got, sent)
        assert sent.any()  # random data, not zeros that any broken decoder would return


@pytest.mark.parametrize(
    ("protocol", "engine"),
    [("http", True), ("http", False), ("grpc", True), ("grpc", False)],
    ids=["http-engine", "http-library", "grpc-engine", "grpc-library"],
)
def test_the_canary_reads_every_answer_of_a_healthy_model(
    real_triton: RealTriton, protocol: str, engine: bool
) -> None:
    """Breaks if the canary mis-reads real Triton's answers (over HTTP: inflating its
    gzipped answers a second time, "incorrect header check", 100 % bad_response), if a
    request sent goes unanswered or off the open-loop schedule, if latency is timed from
    anything but when the request was taken up, or if one path (the engine, the daemon's,
    gRPC over its own HTTP/2; the library path) judges an answer otherwise than the other."""
    plan = canary_plan(real_triton, "batching", protocol)
    with capture_logs() as logs:
        run = _run(plan, results=20, engine=engine, settle=True)
    snap, canary = run.snap, run.canary
    successes = snap.outcomes[Outcome.SUCCESS]
    assert successes >= 20
    assert sum(snap.outcomes.values()) == successes
    assert snap.last_error is None
    assert successes == len(canary.allowed) == len(canary.judged)  # each one sent, answered
    assert run.engine_sent == (successes if engine else 0)  # and by the path asked for
    intended = canary.allowed
    assert intended == pytest.approx(
        [intended[0] + k / plan.rate for k in range(len(intended))], abs=1e-6
    )
    assert snap.latency_count == successes
    if engine:  # our readers stamp each answer's arrival: latency ends there
        pairs = zip(canary.judged, canary.woke, strict=True)
        latencies = [answer.received_at - woke for (_, answer), woke in pairs]
        assert snap.latency_sum == pytest.approx(sum(latencies))
    else:  # the library's results carry no arrival: latency ends when it is recorded
        pairs = zip(canary.recorded_at, canary.woke, strict=True)
        latencies = [recorded - woke for recorded, woke in pairs]
        assert sum(latencies) <= snap.latency_sum < successes * plan.timeout
    assert all(0 < latency < plan.timeout for latency in latencies), latencies
    late = [woke - at for (at, _), woke in zip(canary.judged, canary.woke, strict=True)]
    assert snap.send_lateness_count == successes  # the client's lateness, kept beside it
    assert snap.send_lateness_sum == pytest.approx(sum(late))
    _assert_echoed(run.exchanges, "OUTPUT0")
    assert len(run.exchanges) == successes
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
    run = _run(canary_plan(real_triton, "batching", "http"), results=3)
    assert isinstance(run.canary.sender, UnarySender)
    assert run.canary.sender.tensor_format == "binary"
    assert run.binary and all(run.binary)  # from the first request on


@pytest.mark.parametrize(
    ("accept", "expected"),
    [("gzip", "gzip"), ("deflate", "deflate"), (OFFERED_ENCODINGS, "gzip"), (None, None)],
)
def test_triton_compresses_infer_answers_as_asked_and_each_decodes(
    real_triton: RealTriton, accept: str | None, expected: str | None
) -> None:
    """Breaks if Triton's Content-Encoding for an infer answer changes or one of them no
    longer decodes (the canary's infers ask for none: Triton answers plain; a client
    offering what HTTP libraries offer by default gets gzip)."""
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
    ("protocol", "engine", "outcome", "status", "error"),
    [
        ("http", True, Outcome.HTTP_ERROR, 500, "[500] negative input: failure asked for"),
        ("http", False, Outcome.HTTP_ERROR, 500, "[500] negative input: failure asked for"),
        ("grpc", True, Outcome.GRPC_ERROR, None, "[StatusCode.INTERNAL] negative input: failure"),
        ("grpc", False, Outcome.GRPC_ERROR, None, "[StatusCode.INTERNAL] negative input: failure"),
    ],
    ids=["http-engine", "http-library", "grpc-engine", "grpc-library"],
)
def test_a_failing_model_says_why_in_its_log_lines_and_its_stats(
    real_triton: RealTriton,
    tmp_path: Path,
    protocol: str,
    engine: bool,
    outcome: Outcome,
    status: int | None,
    error: str,
) -> None:
    """Breaks if canary failures go unlogged (the real flaky model fails every request
    that holds a negative value) or the log stops limiting itself to 3 whole lines; on
    either path, whose answers the canary judges and logs alike."""
    sample = tmp_path / "negative.npy"
    np.save(sample, np.array([[-1, 0, 0, 0]], dtype=np.float32))
    plan = canary_plan(
        real_triton, "flaky", protocol, inputs={"INPUT0": InputOverride(file=sample)}
    )
    with capture_logs() as logs:
        # Then the breaker holds back (one probe per 10 s): every request sent is answered.
        run = _run(plan, results=BREAKER_FAILURES, engine=engine, settle=True)
    snap = run.snap
    assert snap.outcomes[outcome] == len(run.canary.allowed)
    assert run.engine_sent == (len(run.canary.allowed) if engine else 0)
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


def test_a_model_failing_one_request_in_five_is_logged_with_the_servers_reason(
    real_triton: RealTriton,
) -> None:
    """Breaks if a fail_ratio failure (successes in between) goes unlogged or unkept, or
    the canary judges a request other than the one the server failed."""
    config = real_triton.config("flaky")
    assert config["instance_group"][0]["count"] == 1  # the model counts per instance
    # One in five, counted by the model (tests/triton_models/identity.py): requests 5,
    # 10, 15, … fail, never five in a row, so the circuit breaker stays closed.
    config["parameters"]["fail_ratio"] = {"string_value": "0.2"}
    real_triton.load("flaky", config)  # a new instance: its count starts at zero
    try:
        with capture_logs() as logs:
            run = _run(canary_plan(real_triton, "flaky", "http"), results=40, settle=True)
    finally:
        real_triton.reset("flaky")
    snap, canary = run.snap, run.canary
    sent = len(canary.allowed)
    assert sent >= 40
    failed = [isinstance(answer, BaseException) for _, answer in canary.judged]
    assert failed == [(k + 1) % 5 == 0 for k in range(sent)]
    assert snap.outcomes[Outcome.HTTP_ERROR] == sent // 5
    assert snap.outcomes[Outcome.SUCCESS] == sent - sent // 5
    assert sum(snap.outcomes.values()) == sent
    _assert_echoed(run.exchanges, "OUTPUT0")  # the successes among them
    assert len(run.exchanges) == sent - sent // 5
    lines = [log for log in logs if log["event"] == "canary_request_failed"]
    assert len(lines) == 3  # FULL_LINES; the rest are counted within the minute
    assert all(line["error"] == "[500] fail_ratio: failure asked for" for line in lines)
    assert all(line["status"] == 500 for line in lines)
    (suppressed,) = [log for log in logs if log["event"] == "canary_failures_suppressed"]
    assert suppressed["count"] == sent // 5 - 3
    assert snap.last_error is not None
    assert snap.last_error.error == "[500] fail_ratio: failure asked for"


def test_the_engines_grpc_canary_reached_triton_once_per_request_and_saw_its_time(
    real_triton: RealTriton,
) -> None:
    """Breaks if the engine's gRPC canary counts a request Triton never served (or
    serves one twice), or its latencies miss time the server itself spent (a clock
    stopped at the wrong frame): each is at least Triton's own request duration."""
    before = real_triton.stats("batching")["inference_stats"]["success"]
    run = _run(canary_plan(real_triton, "batching", "grpc"), results=20, settle=True)
    after = real_triton.stats("batching")["inference_stats"]["success"]
    served, served_ns = after["count"] - before["count"], after["ns"] - before["ns"]
    successes = run.snap.outcomes[Outcome.SUCCESS]
    assert successes == len(run.canary.allowed) == run.engine_sent
    assert served == successes
    assert run.snap.latency_sum >= served_ns * 1e-9  # the client's time holds the server's


def test_a_missing_model_fails_on_the_engine_with_the_librarys_error(
    real_triton: RealTriton,
) -> None:
    """Breaks if the engine's gRPC path reports Triton's refusal (a trailers-only
    NOT_FOUND) with another outcome or other words than the library path (``grpcio``
    read by ``tritonclient``) does."""
    stats = CanaryBoard()
    plan = canary_plan(real_triton, "batching", "grpc")
    stats.declare([plan.key])
    sender = CanaryEngine()

    async def go() -> tuple[str, str]:
        client = client_for("grpc", plan.http_url, plan.grpc_url)
        canary = RecordingCanary(plan, client, stats, seed=1, engine=sender)
        try:
            canary.sender = await canary.prepare()
            assert isinstance(canary.sender, UnarySender)
            tensors = canary.sender._tensors
            with pytest.raises(InferenceServerException) as caught:  # the library's own failure
                await library_infer(client, "nope", "", tensors, timeout=plan.timeout)
            library = (str(classify_error(caught.value, "grpc")), error_text(caught.value))
            encoded = client.infer_request("nope", "", tensors, binary=False)
            request = client.wire_request(encoded, timeout=plan.timeout, limits=plan.limits)
            assert request is not None
            host, port, tls = client.engine_endpoint
            now = asyncio.get_running_loop().time()
            serving = asyncio.create_task(
                sender.serve(
                    canary,
                    host,
                    port,
                    request,
                    timeout=plan.timeout,
                    max_in_flight=1,
                    first_send=now,
                    tls=tls,
                )
            )
            async with asyncio.timeout(WAIT_SECONDS):
                while not canary.judged:
                    await asyncio.sleep(0.01)
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving
        finally:
            await client.close()
        return library

    try:
        with capture_logs() as logs:
            outcome, text = asyncio.run(go())
    finally:
        sender.stop()
    assert (outcome, text) == (
        "grpc_error",
        "[StatusCode.NOT_FOUND] Request for unknown model: 'nope' is not found",
    )
    (line, *_) = [log for log in logs if log["event"] == "canary_request_failed"]
    assert (line["outcome"], line["error"]) == (outcome, text)
    snap = stats.snapshot(0)[0]
    assert snap.last_error is not None
    assert (snap.last_error.outcome, snap.last_error.error) == (outcome, text)
