"""Malformed HTTP requests get Triton's ``{"error": ...}`` with status 400, never a 500 page."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tritonwatch.sim.server import Simulator

INPUT0 = {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16]}


@pytest.mark.parametrize(
    ("path", "body", "headers", "message"),
    [
        ("/v2/models/simple/infer", b"[1, 2]", {}, "the inference request must be a JSON object"),
        (
            "/v2/models/simple/infer",
            b'{"inputs": [1]}',
            {},
            "'inputs' must be a list of tensor objects",
        ),
        (
            "/v2/models/simple/infer",
            json.dumps({"inputs": [{**INPUT0, "shape": "1x16"}]}).encode(),
            {},
            "each input needs a 'name', a 'datatype' and a 'shape' of counts",
        ),
        (
            "/v2/models/simple/infer",
            b'{"inputs": []}',
            {"Inference-Header-Content-Length": "abc"},
            "Inference-Header-Content-Length must be a byte count within the body, got: 'abc'",
        ),
        (
            "/v2/models/simple/infer",
            json.dumps({"inputs": [{**INPUT0, "parameters": {"binary_data_size": 64}}]}).encode(),
            {"Inference-Header-Content-Length": "0"},
            "failed to parse the request JSON buffer",
        ),
        (
            "/v2/models/simple/infer",
            json.dumps({"inputs": [{**INPUT0, "data": [1, 2]}]}).encode(),
            {},
            "unexpected number of elements for input 'INPUT0': shape [1, 16] needs 16, got 2",
        ),
        ("/v2/models/simple/infer", b'{"outputs": [5]}', {}, "'outputs' must be a list of objects"),
        (
            "/v2/repository/models/simple/load",
            b'{"parameters": [1]}',
            {},
            "'parameters' must be an object",
        ),
        (
            "/v2/repository/models/simple/load",
            b'{"parameters": {"config": 5}}',
            {},
            "parameter 'config' must be a JSON string",
        ),
        ("/v2/repository/index", b"nope", {}, "failed to parse the request JSON buffer"),
    ],
)
def test_malformed_request_is_a_400_with_a_reason(
    sim: Simulator, path: str, body: bytes, headers: dict[str, str], message: str
) -> None:
    """Each malformed body or header is refused with INVALID_ARG and says why."""
    request = urllib.request.Request(sim.http_url + path, data=body, headers=headers, method="POST")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=5)
    assert caught.value.code == 400
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
        "error": "unexpected end of binary data for input 'INPUT0'"
    }
    caught.value.close()
