"""Triton's binary tensor extension for a request body, without ``tritonclient.http``.

The body is what ``tritonclient.http.InferenceServerClient.generate_request_body``
makes (tests/probe/test_canary_binary_tensors.py holds the two byte for byte): a compact
JSON header naming each input with its ``binary_data_size`` and asking for binary
outputs, then every input's raw bytes. Importing ``tritonclient.http`` to make it
pulls gevent and about 30 MiB into the daemon, which talks HTTP through its own lean
client (:mod:`~tritonwatch.probe.canary_http`); ``tritonclient.utils``, which
serializes BYTES tensors exactly as the client does, is light.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from tritonclient.utils import serialize_byte_tensor

from tritonwatch.probe.payload import Tensor


def _raw(tensor: Tensor) -> bytes:
    if tensor.datatype == "BYTES":
        serialized = serialize_byte_tensor(tensor.data)
        return bytes(serialized.item()) if serialized.size > 0 else b""
    return tensor.data.tobytes()


def binary_request_body(tensors: Sequence[Tensor]) -> tuple[bytes, dict[str, str]]:
    """The body and the headers (``Inference-Header-Content-Length`` among them) of an
    infer request carrying ``tensors`` as binary data and asking for binary outputs."""
    raws = [_raw(tensor) for tensor in tensors]
    header = {
        "inputs": [
            {
                "name": tensor.name,
                "shape": [int(d) for d in tensor.data.shape],
                "datatype": tensor.datatype,
                "parameters": {"binary_data_size": len(raw)},
            }
            for tensor, raw in zip(tensors, raws, strict=True)
        ],
        "parameters": {"binary_data_output": True},
    }
    head = json.dumps(header, separators=(",", ":")).encode()
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(head)),
    }
    return head + b"".join(raws), headers
