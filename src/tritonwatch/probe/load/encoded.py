"""Infer requests encoded once (HTTP and gRPC), with tritonclient as the reference encoder.

``tritonclient.http``'s own ``generate_request_body`` builds the binary-tensor body
(JSON header plus raw bytes) and ``parse_response_body`` reads answers, so the wire
format is exactly the client's; only the per-request repetition is removed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

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
    # On use: tritonclient.http brings gevent (~5 MiB), which a daemon without a sweep
    # never needs (tests/test_import_footprint.py).
    import tritonclient.http as httpclient  # noqa: PLC0415

    inputs = []
    for tensor in tensors:
        infer_input = httpclient.InferInput(tensor.name, list(tensor.data.shape), tensor.datatype)
        infer_input.set_data_from_numpy(tensor.data, binary_data=True)
        inputs.append(infer_input)
    body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs)
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = f"/v2/models/{quote(model)}"
    if version:
        path += f"/versions/{quote(version)}"
    headers = [
        f"POST {path}/infer HTTP/1.1",
        f"Host: {host}:{port}",
        "Connection: keep-alive",
        "Content-Type: application/octet-stream",
        f"Content-Length: {len(body)}",
    ]
    if json_size is not None:
        headers.append(f"Inference-Header-Content-Length: {json_size}")
    head = ("\r\n".join(headers) + "\r\n\r\n").encode("latin-1")
    return EncodedHttpInfer(host, port, head + (body if isinstance(body, bytes) else body.encode()))


def grpc_infer_request(model: str, version: str, tensors: Sequence[Tensor]) -> bytes:
    """The serialized ``ModelInferRequest`` ``tritonclient.grpc`` would send for ``tensors``
    (its own builder: the wire format is exactly the client's)."""
    import tritonclient.grpc as grpcclient  # noqa: PLC0415 - heavy; load on use
    from tritonclient.grpc._utils import _get_inference_request  # noqa: PLC0415

    inputs = []
    for tensor in tensors:
        infer_input = grpcclient.InferInput(tensor.name, list(tensor.data.shape), tensor.datatype)
        infer_input.set_data_from_numpy(tensor.data)
        inputs.append(infer_input)
    request = _get_inference_request(
        model_name=model, inputs=inputs, model_version=version, request_id="", outputs=None,
        sequence_id=0, sequence_start=False, sequence_end=False, priority=0, timeout=None,
        parameters=None,
    )  # fmt: skip
    encoded: bytes = request.SerializeToString()
    return encoded
