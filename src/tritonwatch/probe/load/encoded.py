"""Infer requests encoded once (HTTP and gRPC), byte for byte as ``tritonclient`` sends them.

HTTP: the binary-tensor body is :func:`~tritonwatch.probe.binary_tensors.binary_request_body`,
the canary's, which tests/probe/test_canary_lean_clients.py holds byte for byte to
``tritonclient.http``'s ``generate_request_body``; importing ``tritonclient.http``
(gevent, numpy) to make it is not needed. gRPC: ``tritonclient.grpc``'s own builder
makes the ``ModelInferRequest`` (that client imports numpy anyway, so the tensors are
handed over as arrays). Only the per-request repetition is removed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from tritonwatch.kserve import model_path
from tritonwatch.probe.binary_tensors import binary_request_body
from tritonwatch.probe.payload import Tensor


@dataclass(frozen=True, slots=True)
class EncodedHttpInfer:
    """A complete HTTP/1.1 infer request as bytes, and where to send it."""

    host: str
    port: int
    payload: bytes


def encode_http_infer(
    url: str, model: str, version: str, tensors: Sequence[Tensor]
) -> EncodedHttpInfer:
    """The keep-alive HTTP/1.1 request ``tritonclient.http`` would send for ``tensors``."""
    body, body_headers = binary_request_body(tensors)
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    headers = [
        f"POST {model_path(model, version)}/infer HTTP/1.1",
        f"Host: {host}:{port}",
        "Connection: keep-alive",
        f"Content-Type: {body_headers['Content-Type']}",
        f"Content-Length: {len(body)}",
        f"Inference-Header-Content-Length: {body_headers['Inference-Header-Content-Length']}",
    ]
    head = ("\r\n".join(headers) + "\r\n\r\n").encode("latin-1")
    return EncodedHttpInfer(host, port, head + body)


def grpc_infer_request(model: str, version: str, tensors: Sequence[Tensor]) -> bytes:
    """The serialized ``ModelInferRequest`` ``tritonclient.grpc`` would send for ``tensors``
    (its own builder: the wire format is exactly the client's; ``Tensor.data`` is the
    array it takes, which numpy, loaded with that client, makes from the tensor's bytes)."""
    import tritonclient.grpc as grpcclient  # noqa: PLC0415 - heavy; load on use
    from tritonclient.grpc._utils import _get_inference_request  # noqa: PLC0415

    inputs = []
    for tensor in tensors:
        infer_input = grpcclient.InferInput(tensor.name, list(tensor.shape), tensor.datatype)
        infer_input.set_data_from_numpy(tensor.data)
        inputs.append(infer_input)
    request = _get_inference_request(
        model_name=model, inputs=inputs, model_version=version, request_id="", outputs=None,
        sequence_id=0, sequence_start=False, sequence_end=False, priority=0, timeout=None,
        parameters=None,
    )  # fmt: skip
    encoded: bytes = request.SerializeToString()
    return encoded
