"""Requests made per send (probe/canary/request_source.py): which models get them, and
each request's bytes as ``tritonclient`` would send them with a sequence's flags."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2
from tritonclient.grpc._utils import _get_inference_request

from tritonwatch.config.canary_schema import SequenceCanary
from tritonwatch.kserve.binary_tensors import binary_request_body
from tritonwatch.kserve.encoded import grpc_infer_request
from tritonwatch.kserve.json_tensors import json_request_body
from tritonwatch.kserve.payload import Tensor, TensorSpec, build_inputs
from tritonwatch.probe.canary.clients import client_for
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.engine_wires import VaryingGrpcWire, VaryingHttp1Wire
from tritonwatch.probe.canary.model_canary import STALL_INTERVALS, ModelCanary
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.canary.request_source import varying_requests
from tritonwatch.probe.canary.unary import UnarySender
from tritonwatch.state.canary_board import CanaryBoard
from tritonwatch.wire.http2 import UnaryRequest
from tritonwatch.wire.limits import DEFAULT_LIMITS, AnswerLimits, AnswerTooLargeError, HttpRequest

SPECS = [TensorSpec("INPUT0", "FP32", (1, 16))]
TENSORS = build_inputs("m", SPECS, {}, dynamic_dim=1)
PLAIN: dict[str, Any] = {"max_batch_size": 8}
CACHED: dict[str, Any] = {"max_batch_size": 8, "response_cache": {"enable": True}}
STATEFUL: dict[str, Any] = {"max_batch_size": 4, "sequence_batching": {"direct": {}}}
ITERATIVE: dict[str, Any] = {
    "max_batch_size": 4,
    "sequence_batching": {"direct": {}, "iterative_sequence": True},
}


def _plan(protocol: str = "http", **changes: Any) -> CanaryPlan:
    fields: dict[str, Any] = {
        "target": "t",
        "model": "m",
        "version": "",
        "protocol": protocol,
        "http_url": "http://127.0.0.1:1",
        "grpc_url": "grpc://127.0.0.1:2",
        "rate": 20.0,
        "poisson": False,
        "timeout": 1.0,
        "max_in_flight": 2,
        "data": "random",
        "sequence": SequenceCanary(id_start=77, id_count=1),
    }
    fields.update(changes)
    return CanaryPlan(**fields)


def _samples_file(tmp_path: Path, count: int) -> Path:
    path = tmp_path / "samples.json"
    data = [{"INPUT0": [float(i)] * 16} for i in range(count)]
    path.write_text(json.dumps({"data": data}), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("config", "changes"),
    [(PLAIN, {}), (CACHED, {"cache": "hit"}), (ITERATIVE, {}), (None, {})],
    ids=["plain", "cache hit", "iterative sequence", "no config API"],
)
def test_a_model_one_request_measures_keeps_the_fixed_request(
    config: dict[str, Any] | None, changes: dict[str, Any]
) -> None:
    """Breaks if a plain model (or a cached one asked to hit, or an iterative-sequence
    one, which Triton sequences itself) loses the request built once, whose send costs
    nothing per request."""
    first, requests = varying_requests(_plan(**changes), config, SPECS, TENSORS)
    assert (first, requests) == (tuple(TENSORS), None)


def test_one_input_data_sample_is_a_fixed_request_too(tmp_path: Path) -> None:
    """Breaks if a one-sample file makes a per-request source instead of the fast path."""
    plan = _plan(input_data=_samples_file(tmp_path, 1))
    first, requests = varying_requests(plan, PLAIN, SPECS, TENSORS)
    assert requests is None
    assert first[0].values() == [0.0] * 16


def test_samples_rotate_one_per_request(tmp_path: Path) -> None:
    """Breaks if several samples are not sent in turn, from the first, round and round."""
    plan = _plan(input_data=_samples_file(tmp_path, 3))
    _, requests = varying_requests(plan, PLAIN, SPECS, TENSORS)
    assert requests is not None
    sent = [requests.source.next().tensors[0].values()[0] for _ in range(7)]
    assert sent == [0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 0.0]


def test_a_cached_model_gets_unique_bytes_and_a_stateful_one_its_flags() -> None:
    """Breaks if a cache miss canary repeats its bytes or a sequence canary's requests
    lack the sequence parameters."""
    _, cached = varying_requests(_plan(), CACHED, SPECS, TENSORS)
    assert cached is not None and cached.sequence is None
    assert len({cached.source.next().tensors[0].raw for _ in range(100)}) == 100
    _, stateful = varying_requests(_plan(), STATEFUL, SPECS, TENSORS)
    assert stateful is not None and stateful.sequence is not None
    stateful.planned(0.0)
    parts = stateful.source.next()
    assert parts.tensors == tuple(TENSORS)
    assert parts.parameters == {"sequence_id": 77, "sequence_start": True, "sequence_end": False}


def _tritonclient_http_body(tensors: list[Tensor], **sequence: Any) -> bytes:
    inputs = []
    for tensor in tensors:
        infer_input = httpclient.InferInput(tensor.name, list(tensor.shape), tensor.datatype)
        infer_input.set_data_from_numpy(tensor.data, binary_data=True)
        inputs.append(infer_input)
    body, _ = httpclient.InferenceServerClient.generate_request_body(inputs, **sequence)
    return bytes(body)


@pytest.mark.parametrize("sequence_id", [9_223_372_036_000_000_000, "tritonwatch-5"])
def test_a_sequence_request_body_is_byte_for_byte_tritonclients(sequence_id: int | str) -> None:
    """Breaks if the binary body with a sequence's flags differs from what
    tritonclient.http sends for the same sequence arguments."""
    flags = {"sequence_id": sequence_id, "sequence_start": True, "sequence_end": False}
    body, _ = binary_request_body(TENSORS, flags)
    assert body == _tritonclient_http_body(TENSORS, **flags)


def test_a_json_request_carries_the_flags_as_request_parameters() -> None:
    """Breaks if the JSON form drops the parameters (the sequence canary over a server
    without binary tensors)."""
    flags = {"sequence_id": 5, "sequence_start": False, "sequence_end": True}
    body, _ = json_request_body(TENSORS, flags)
    assert json.loads(body)["parameters"] == flags


@pytest.mark.parametrize("sequence_id", [9_223_372_036_000_000_000, "tritonwatch-5"])
def test_a_sequence_grpc_request_is_tritonclients(sequence_id: int | str) -> None:
    """Breaks if the ModelInferRequest with a sequence's flags differs from what
    tritonclient.grpc builds for the same sequence arguments (int64 or string id)."""
    inputs = []
    for tensor in TENSORS:
        infer_input = grpcclient.InferInput(tensor.name, list(tensor.shape), tensor.datatype)
        infer_input.set_data_from_numpy(np.asarray(tensor.data))
        inputs.append(infer_input)
    theirs = _get_inference_request(
        model_name="m",
        inputs=inputs,
        model_version="",
        request_id="",
        outputs=None,
        sequence_id=sequence_id,
        sequence_start=False,
        sequence_end=True,
        priority=0,
        timeout=None,
        parameters=None,
    )
    flags = {"sequence_id": sequence_id, "sequence_start": False, "sequence_end": True}
    ours = grpc_infer_request("m", "", TENSORS, flags)
    assert ours == theirs.SerializeToString(deterministic=True)
    parsed = service_pb2.ModelInferRequest.FromString(ours)
    assert parsed.parameters["sequence_id"].WhichOneof("parameter_choice") == (
        "string_param" if isinstance(sequence_id, str) else "int64_param"
    )


def test_the_engines_wires_make_a_request_per_send() -> None:
    """Breaks if a connection of a varying canary sends one request twice (HTTP/1.1
    keep-alive and HTTP/2 alike), or a request loses the limits it is read with."""
    plan = _plan(limits=AnswerLimits(max_answer_bytes=100_000, max_header_bytes=2048))
    assert plan.limits != DEFAULT_LIMITS  # (a request that lost them would read the defaults)
    _, cached = varying_requests(plan, CACHED, SPECS, TENSORS)
    assert cached is not None
    http_client = client_for("http", plan.http_url, plan.grpc_url)
    http = cached.engine_requests(http_client, binary=True)
    assert http is not None
    wire = http.new_wire()
    assert isinstance(wire, VaryingHttp1Wire)
    sent = [wire.start() for _ in range(3)]
    assert len(set(sent)) == 3
    made = [http.make() for _ in range(3)]
    assert all(isinstance(r, HttpRequest) and r.limits == plan.limits for r in made)
    assert len({r.data for r in made if isinstance(r, HttpRequest)} | set(sent)) == 6
    with pytest.raises(AnswerTooLargeError, match="max_answer_bytes"):  # read within them
        wire.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 100001\r\n\r\n", 0.0)
    grpc = cached.engine_requests(client_for("grpc", plan.http_url, plan.grpc_url), binary=False)
    assert grpc is not None
    assert isinstance(grpc.new_wire(), VaryingGrpcWire)
    calls = [grpc.make() for _ in range(3)]  # (a session starts its next after an answer)
    assert all(isinstance(c, UnaryRequest) and c.limits == plan.limits for c in calls)
    assert len({c.frames for c in calls if isinstance(c, UnaryRequest)}) == 3


def test_the_library_path_sends_a_sequence_of_its_own_and_leaves_the_plan_alone() -> None:
    """Breaks if a request through the library (a second opinion) takes the flags planned
    for the engine's next send, or is anything but START and END with a fresh id."""
    _, stateful = varying_requests(
        _plan(sequence=SequenceCanary(id_start=77, id_count=10)), STATEFUL, SPECS, TENSORS
    )
    assert stateful is not None and stateful.sequence is not None
    stateful.planned(0.0)
    lone = stateful.source.next(lone=True).parameters
    assert (lone["sequence_start"], lone["sequence_end"]) == (True, True)
    planned = stateful.source.next().parameters
    assert (planned["sequence_start"], planned["sequence_end"]) == (True, False)
    assert lone["sequence_id"] != planned["sequence_id"]


class _ModelApi:
    """Metadata and config of a stateful model whose metadata also lists a control input."""

    protocol = "http"

    async def extensions(self) -> frozenset[str]:
        return frozenset({"binary_tensor_data"})

    async def metadata(self, model: str, version: str) -> dict[str, Any]:
        inputs = [
            {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]},
            {"name": "START", "datatype": "INT32", "shape": [-1, 1]},
        ]
        return {"inputs": inputs, "outputs": [{"name": "OUTPUT0"}]}

    async def config(self, model: str, version: str) -> dict[str, Any] | None:
        control = [{"kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, 1]}]
        batching = {"direct": {}, "control_input": [{"name": "START", "control": control}]}
        return {**STATEFUL, "sequence_batching": batching}


def test_a_sequence_canary_sends_no_control_input_and_keeps_its_plan() -> None:
    """Breaks if a control input the metadata lists is sent as a tensor, the canary's
    gaps stop following the sequence plan (19 short, one stretched), or the stall check
    reads the stretched gap after END as a stalled canary."""
    plan = _plan(rate=1.0, sequence=SequenceCanary())
    board = CanaryBoard()
    board.declare([plan.key])
    canary = ModelCanary(plan, _ModelApi(), board, engine=CanaryEngine())  # type: ignore[arg-type]
    sender = canary.sender = asyncio.run(canary.prepare())
    assert isinstance(sender, UnarySender)
    assert [t.name for t in sender._tensors] == ["INPUT0"]
    gaps: list[float] = []
    for _ in range(40):
        send = 100.0 + sum(gaps)
        gaps.append(canary.next_gap())
        assert canary.may_send(send)
    assert gaps == [0.5] * 19 + [10.5] + [0.5] * 19 + [10.5]
    assert canary.silence_allowed() == STALL_INTERVALS * 10.5 + plan.timeout
