"""Malformed HTTP requests get Triton's ``{"error": ...}`` with Triton's status, never a crash.

Triton's JSON reader refuses a member that is missing or of the wrong type with INTERNAL
(500); what the protocol forbids is INVALID_ARG (400). The messages are real Triton's
(tests/sim/test_differential_real_triton.py holds the simulator to a real server).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tritonwatch.sim.server import Simulator

pytestmark = pytest.mark.real

INPUT0 = {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16]}
DATA = {**INPUT0, "data": [1] * 16}


@pytest.mark.parametrize(
    ("path", "body", "headers", "status", "message"),
    [
        (
            "/v2/models/simple/infer",
            b"[1, 2]",
            {},
            500,
            "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'",
        ),
        (
            "/v2/models/simple/infer",
            b'{"inputs": [1]}',
            {},
            400,
            "Input must set only one of the following fields",
        ),
        (
            "/v2/models/simple/infer",
            json.dumps({"inputs": [{**INPUT0, "shape": "1x16"}]}).encode(),
            {},
            500,
            "Unable to parse 'shape': attempt to access JSON non-array as array",
        ),
        (
            "/v2/models/simple/infer",
            b'{"inputs": []}',
            {"Inference-Header-Content-Length": "abc"},
            400,
            "Inference-Header-Content-Length must be a byte count within the body, got: 'abc'",
        ),
        (
            "/v2/models/simple/infer",
            json.dumps({"inputs": [{**INPUT0, "parameters": {"binary_data_size": 64}}]}).encode(),
            {"Inference-Header-Content-Length": "0"},
            500,
            "failed to parse the request JSON buffer",
        ),
        (
            "/v2/models/simple/infer",
            json.dumps({"inputs": [{**INPUT0, "data": [1, 2]}]}).encode(),
            {},
            500,
            "Unable to parse 'data': Shape does not match true shape of 'data' field",
        ),
        (
            "/v2/models/simple/infer",
            json.dumps({"inputs": [DATA, {**DATA, "name": "INPUT1"}], "outputs": [5]}).encode(),
            {},
            500,
            "Unable to parse 'name': attempt to access non-existing object member 'name'",
        ),
        (
            "/v2/repository/models/simple/load",
            b'{"parameters": [1]}',
            {},
            500,
            "attempt to get members for non-object",
        ),
        (
            "/v2/repository/models/simple/load",
            b'{"parameters": {"config": 5}}',
            {},
            500,
            "attempt to access JSON non-string as string",
        ),
        ("/v2/repository/index", b"nope", {}, 500, "failed to parse the request JSON buffer"),
    ],
)
def test_malformed_request_gets_tritons_status_and_reason(
    sim: Simulator, path: str, body: bytes, headers: dict[str, str], status: int, message: str
) -> None:
    """Each malformed body or header is refused with Triton's status and says why."""
    request = urllib.request.Request(sim.http_url + path, data=body, headers=headers, method="POST")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=5)
    assert caught.value.code == status
    assert message in json.loads(caught.value.read())["error"]
    caught.value.close()


def test_binary_tensor_data_short_of_its_declared_size_is_refused(sim: Simulator) -> None:
    """binary_data_size larger than what follows the JSON header is an error, not a crash."""
    header = json.dumps({"inputs": [{**INPUT0, "parameters": {"binary_data_size": 64}}]}).encode()
    request = urllib.request.Request(
        sim.http_url + "/v2/models/simple/infer",
        data=header + b"\0" * 10,
        headers={"Inference-Header-Content-Length": str(len(header))},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=5)
    assert caught.value.code == 400
    assert json.loads(caught.value.read()) == {
        "error": "unexpected size for input 'INPUT0', expecting 54 additional bytes for model "
        "'simple'"
    }
    caught.value.close()
