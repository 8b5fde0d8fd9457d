"""Our faults are ours (issue 25, item 5): an answer our own reader cannot read is asked
for once more through libraries; read there, it is ``client_error`` and the model's
canary leaves the fast path; not read there either, it is the server's ``bad_response``.

The bug is injected into our reader (monkeypatched to refuse answers that are valid),
so the library's reading of the same bytes is what decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from answer_server_support import (
    ANSWER_JSON,
    answer_server,
    answer_with,
    http_answer,
    http_plan,
    outcome_count,
    run_canary,
)
from engine_support import until as _until_done
from prometheus_client.core import Metric

from tritonwatch.export.canary_metrics import CanaryCollector
from tritonwatch.kserve import infer_response
from tritonwatch.probe.canary import library_path
from tritonwatch.probe.canary.clients import client_for
from tritonwatch.probe.canary.model_canary import ModelCanary
from tritonwatch.records.observations import Outcome
from tritonwatch.state.canary_board import CanaryBoard
from tritonwatch.wire import http1
from tritonwatch.wire.http1 import HttpProtocolError
from tritonwatch.wire.kserve_protobuf import ProtobufDecodeError


def _inject_parser_bug(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Our HTTP/1.1 reader refuses every infer answer (the ones holding "model_name"),
    however valid; returns a list that counts the refusals."""
    refused: list[int] = []
    read_head = http1.Http1Connection._read_head

    def buggy(self: http1.Http1Connection) -> http1.ResponseHead | None:
        if b'"model_name"' in bytes(self._buffer):
            refused.append(1)
            raise HttpProtocolError("injected: our parser mis-reads this answer")
        return read_head(self)

    monkeypatch.setattr(http1.Http1Connection, "_read_head", buggy)
    return refused


def _on_library(canary: ModelCanary) -> bool:
    """Whether the canary's requests went over to the library path."""
    assert canary.sender is not None and canary.sender.library is not None
    return canary.sender.library.active


def _client_errors(stats: CanaryBoard) -> dict[tuple[str, str, str], float]:
    metrics: list[Metric] = list(CanaryCollector(stats, clock=lambda: 0.0).collect())
    family = next(m for m in metrics if m.name == "tritonwatch_canary_client_errors")
    return {
        (s.labels["target"], s.labels["model"], s.labels["protocol"]): s.value
        for s in family.samples
        if s.name.endswith("_total")
    }


def test_an_answer_our_http_parser_mis_reads_is_a_client_error_and_the_model_leaves_the_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Breaks if an answer that only our parser cannot read is billed to the server, is
    not logged once with its first line, is not counted in
    tritonwatch_canary_client_errors_total, or the model's canary keeps sending from
    the engine (where our parser would fail every request)."""
    refused = _inject_parser_bug(monkeypatch)
    with answer_server(answer_with(http_answer(ANSWER_JSON))) as server:
        plan = http_plan(server)
        left: list[int] = []

        def until(stats: CanaryBoard, engine: Any) -> bool:
            if not left and outcome_count(stats, Outcome.CLIENT_ERROR):
                left.append(engine.sent)
            return bool(left) and outcome_count(stats, Outcome.SUCCESS) >= 3

        run = run_canary(plan, client_for("http", server.url, ""), until)
    outcomes = run.outcomes()
    assert outcomes.get(Outcome.BAD_RESPONSE, 0) == 0
    assert outcomes[Outcome.CLIENT_ERROR] == len(refused) >= 1
    assert run.engine_sent == left[0]  # nothing more went out on the engine
    lines = [log for log in run.logs if log["event"] == "canary_client_error"]
    assert len(lines) == outcomes[Outcome.CLIENT_ERROR]
    assert lines[0]["answer_start"] == "HTTP/1.1 200 OK\\r"
    assert "injected: our parser mis-reads" in lines[0]["error"]
    assert lines[0]["now_on"] == "library"
    assert not [log for log in run.logs if log["event"] == "canary_request_failed"]
    assert _client_errors(run.stats) == {("t", "m", "http"): outcomes[Outcome.CLIENT_ERROR]}


def test_an_answer_neither_reader_can_read_is_the_servers_bad_response() -> None:
    """Breaks if a genuinely broken answer (no JSON) is called our fault, if the canary
    leaves the engine for it, or if the library is asked again for every such answer
    (the server's verdict stands for a minute: it is sent each request once)."""
    broken = http_answer(b"this is no KServe v2 answer")
    with answer_server(answer_with(broken)) as server:
        run = run_canary(
            http_plan(server),
            client_for("http", server.url, ""),
            lambda stats, _engine: outcome_count(stats, Outcome.BAD_RESPONSE) >= 4,
        )
        infers = server.infers
    outcomes = run.outcomes()
    assert outcomes.get(Outcome.CLIENT_ERROR, 0) == 0
    assert not _on_library(run.canary)
    assert run.engine_sent >= 4
    assert infers == run.engine_sent + 1  # one second opinion, then the verdict stood
    agreed = [log for log in run.logs if log["event"] == "canary_library_agrees"]
    assert len(agreed) == 1
    assert "the library could not read it either" in agreed[0]["library_error"]


def test_an_answer_the_library_reads_without_the_models_outputs_is_the_servers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Breaks if the second opinion takes any answer the library parses as proof the
    fault was ours: one that lacks the outputs the metadata lists is the server's
    ``bad_response`` (in availability), never ``client_error``, and the canary stays on
    the engine."""
    _inject_parser_bug(monkeypatch)  # our reader refuses it: the library is asked
    wrong_output = json.dumps(
        {
            "model_name": "m",
            "outputs": [{"name": "z", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}],
        }
    ).encode()
    with answer_server(answer_with(http_answer(wrong_output))) as server:
        run = run_canary(
            http_plan(server),
            client_for("http", server.url, ""),
            lambda stats, _engine: outcome_count(stats, Outcome.BAD_RESPONSE) >= 3,
        )
    outcomes = run.outcomes()
    assert outcomes.get(Outcome.CLIENT_ERROR, 0) == 0
    assert not _on_library(run.canary)
    assert not [log for log in run.logs if log["event"] == "canary_client_error"]
    # (one second opinion, or more where answers came before the first verdict did)
    agreed = [log for log in run.logs if log["event"] == "canary_library_agrees"]
    assert agreed and all("lacks output 'y'" in log["library_error"] for log in agreed)


def test_a_verdict_of_the_server_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    """Breaks if, once the library agreed it is the server's, doubted answers are never
    asked about again (a later bug of ours would then be billed to the server)."""
    monkeypatch.setattr(library_path, "VERDICT_SECONDS", 0.0)
    broken = http_answer(b"this is no KServe v2 answer")
    with answer_server(answer_with(broken)) as server:
        run = run_canary(
            http_plan(server),
            client_for("http", server.url, ""),
            lambda stats, _engine: outcome_count(stats, Outcome.BAD_RESPONSE) >= 3,
        )
    agreed = [log for log in run.logs if log["event"] == "canary_library_agrees"]
    assert len(agreed) == run.outcomes()[Outcome.BAD_RESPONSE]


# -- gRPC ------------------------------------------------------------------------------


def _grpc_answer() -> bytes:
    """A valid ModelInferResponse for the canary's model, as Triton writes one."""
    from tritonclient.grpc import service_pb2

    response = service_pb2.ModelInferResponse(model_name="m")
    output = response.outputs.add()
    output.name, output.datatype = "y", "FP32"
    output.shape.extend([1, 2])
    response.raw_output_contents.append(struct.pack("<2f", 1.5, 2.5))
    return response.SerializeToString()


@contextlib.contextmanager
def _grpc_server(answer: bytes) -> Iterator[tuple[int, list[int]]]:
    """A grpcio server on loopback whose ModelInfer answers ``answer`` (raw bytes);
    yields its port and a list counting the calls."""
    calls: list[int] = []

    def infer(_request: bytes, _context: Any) -> bytes:
        calls.append(1)
        return answer

    handler = grpc.method_handlers_generic_handler(
        "inference.GRPCInferenceService",
        {"ModelInfer": grpc.unary_unary_rpc_method_handler(infer)},  # bytes in, bytes out
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port, calls
    finally:
        server.stop(None)


def _grpc_run(answer: bytes, until: Any) -> tuple[Any, int]:
    with (
        answer_server(answer_with(http_answer(ANSWER_JSON))) as api,
        _grpc_server(answer) as (
            port,
            calls,
        ),
    ):
        url = f"grpc://127.0.0.1:{port}"
        plan = http_plan(api, protocol="grpc", grpc_url=url)
        client = client_for("grpc", api.url, url)  # its model APIs over the HTTP server
        run = run_canary(plan, client, until)
        return run, len(calls)


def test_an_answer_our_protobuf_decoder_mis_reads_is_a_grpc_client_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Breaks if a gRPC answer only our protobuf decoder cannot read is billed to the
    server, or the model's gRPC canary stays on the engine's own HTTP/2 and decoder."""

    def buggy(_data: bytes) -> Any:
        raise ProtobufDecodeError("injected: our decoder mis-reads this message")

    monkeypatch.setattr(infer_response, "decode_infer_response", buggy)
    left: list[int] = []

    def until(stats: CanaryBoard, engine: Any) -> bool:
        if not left and outcome_count(stats, Outcome.CLIENT_ERROR):
            left.append(engine.sent)
        return bool(left) and outcome_count(stats, Outcome.SUCCESS) >= 3

    run, calls = _grpc_run(_grpc_answer(), until)
    outcomes = run.outcomes()
    assert outcomes.get(Outcome.BAD_RESPONSE, 0) == 0
    assert outcomes[Outcome.CLIENT_ERROR] >= 1
    assert run.engine_sent == left[0]
    assert calls >= run.engine_sent + 3  # the second opinions, then the library's sends
    line = next(log for log in run.logs if log["event"] == "canary_client_error")
    assert line["protocol"] == "grpc"
    assert "injected: our decoder mis-reads" in line["error"]
    assert line["answer_start"].startswith("\\n\\x01m")  # the message's first bytes
    assert _client_errors(run.stats) == {("t", "m", "grpc"): outcomes[Outcome.CLIENT_ERROR]}


def test_a_grpc_answer_no_reader_can_read_is_the_servers_bad_response() -> None:
    """Breaks if bytes that are no ModelInferResponse for the library either are called
    our fault, or the canary leaves the engine for them."""
    run, calls = _grpc_run(
        b"\xff\xff\xff",
        lambda stats, _engine: outcome_count(stats, Outcome.BAD_RESPONSE) >= 3,
    )
    assert run.outcomes().get(Outcome.CLIENT_ERROR, 0) == 0
    assert not _on_library(run.canary)
    assert calls == run.engine_sent + 1


# -- the library path's own schedule ----------------------------------------------------


class _LateRecorder:
    """A library-path canary of one send (the next is an hour away) that writes down
    when the loop took it up."""

    def __init__(self) -> None:
        self.ended: list[tuple[float, Any, float]] = []

    def next_gap(self) -> float:
        return 3600.0

    def may_send(self, intended: float) -> bool:
        return True

    def record(self, intended: float, answer: Any, woke: float) -> None:
        self.ended.append((intended, answer, woke))


def test_the_library_path_reports_when_its_loop_took_a_late_request_up() -> None:
    """Breaks if a request the loop takes up after its intended send is reported as
    taken up on time: its lateness (the client's own) would go into the server's
    latency instead of ``send_lateness_seconds``."""
    path = library_path.LibraryPath({}, lambda: lambda _timeout: "answered")
    canary = _LateRecorder()

    async def go() -> float:
        loop = asyncio.get_running_loop()
        intended = loop.time() - 0.5  # the loop is already past the send
        serving = asyncio.create_task(
            library_path.serve(path, canary, intended, timeout=5.0, max_in_flight=1)
        )
        try:
            await _until_done(lambda: bool(canary.ended), "the late request's end")
        finally:
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)
        return intended

    intended = asyncio.run(go())
    ((recorded, answer, woke),) = canary.ended
    assert (recorded, answer) == (intended, "answered")
    assert woke >= intended + 0.5  # the loop's clock when it took the request up
