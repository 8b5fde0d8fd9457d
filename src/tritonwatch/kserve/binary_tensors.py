"""Triton's binary tensor extension for a request body, without ``tritonclient.http``.

The body is what ``tritonclient.http.InferenceServerClient.generate_request_body``
makes (tests/probe/test_canary_lean_clients.py holds the two byte for byte): a compact
JSON header naming each input with its ``binary_data_size`` and asking for binary
outputs, then every input's raw bytes. A :class:`~tritonwatch.kserve.payload.Tensor`
already holds those bytes (BYTES elements length-prefixed, as ``tritonclient``
serializes them), so neither ``tritonclient`` (gevent, numpy, ``ml_dtypes``) nor numpy
is imported to make it. The canary and the sweep's load generator both send this body.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from tritonwatch.kserve.payload import Tensor
from tritonwatch.wire.kserve_protobuf import Scalar


def binary_request_body(
    tensors: Sequence[Tensor], parameters: Mapping[str, Scalar] | None = None
) -> tuple[bytes, dict[str, str]]:
    """The body and the headers (``Inference-Header-Content-Length`` among them) of an
    infer request carrying ``tensors`` as binary data and asking for binary outputs;
    ``parameters`` (a sequence's flags) come first in the request's parameters, as
    ``tritonclient.http`` writes them."""
    header = {
        "inputs": [
            {
                "name": tensor.name,
                "shape": [int(d) for d in tensor.shape],
                "datatype": tensor.datatype,
                "parameters": {"binary_data_size": len(tensor.raw)},
            }
            for tensor in tensors
        ],
        "parameters": {**(parameters or {}), "binary_data_output": True},
    }
    head = json.dumps(header, separators=(",", ":")).encode()
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(head)),
    }
    return head + b"".join(tensor.raw for tensor in tensors), headers
