"""Infer requests encoded once (HTTP and gRPC), byte for byte as ``tritonclient`` sends them.

HTTP: the binary-tensor body is :func:`~tritonwatch.kserve.binary_tensors.binary_request_body`,
the canary's, which tests/probe/test_canary_lean_clients.py holds byte for byte to
``tritonclient.http``'s ``generate_request_body``; importing ``tritonclient.http``
(gevent, numpy) to make it is not needed. gRPC: the ``ModelInferRequest`` is built from
:mod:`~tritonwatch.wire.kserve_protobuf`'s hand-written wire format with what that
client's own builder fills in, so the bytes are the client's (tests/probe/
test_grpc_request_bytes.py holds them to it) without importing ``grpc`` and
``tritonclient.grpc`` (about 23 MiB of the daemon). Only the per-request repetition is
removed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from tritonwatch.common.kserve import model_path
from tritonwatch.kserve.binary_tensors import binary_request_body
from tritonwatch.kserve.payload import Tensor
from tritonwatch.wire.kserve_protobuf import Scalar, encode_infer_request


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


def grpc_infer_request(
    model: str,
    version: str,
    tensors: Sequence[Tensor],
    parameters: Mapping[str, Scalar] | None = None,
) -> bytes:
    """The serialized ``ModelInferRequest`` ``tritonclient.grpc`` would send for ``tensors``.

    What its ``infer`` sends when given no request id, outputs, sequence, priority,
    timeout or parameters: the model's name and version, and each input's name,
    datatype and shape with its elements as raw contents (``Tensor.raw`` is exactly the
    bytes ``InferInput.set_data_from_numpy`` would put there, BYTES' length prefixes
    included), written in field number order as protobuf writes them. ``parameters``:
    the request's own (a sequence's ``sequence_id``, ``sequence_start``, ``sequence_end``,
    as ``tritonclient`` sets them from its ``sequence_*`` arguments).
    """
    return encode_infer_request(model, version, tensors, parameters=parameters)
