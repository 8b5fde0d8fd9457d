"""Facts of the KServe v2 / Open Inference Protocol shared by both of its ends here
(the canary's response decoder and the simulator's gRPC server) and by both sources
(the probe's and the scrape's model URLs), which import nothing from each other."""

from __future__ import annotations

from urllib.parse import quote

GRPC_MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
GRPC_MODEL_STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
GRPC_SERVER_READY = "/inference.GRPCInferenceService/ServerReady"
"""The gRPC methods the probe calls, as HTTP/2 paths (``grpc_service.proto``)."""


def model_path(model: str, version: str = "") -> str:
    """``/v2/models/{model}[/versions/{version}]``, the root of every per-model endpoint
    (append ``/infer``, ``/config``, ``/stats``, ``/ready``).

    Each name is quoted whole (``safe=''``): a ``/`` in it becomes ``%2F`` rather than a
    path separator, and ``?``, ``#``, ``%`` and spaces cannot end or bend the path. One
    builder, so the canary, the sweep, the scraper and model discovery ask a server about
    a model under the same URL (they used to disagree on ``/``).
    """
    path = f"/v2/models/{quote(model, safe='')}"
    return f"{path}/versions/{quote(version, safe='')}" if version else path


GRPC_TYPED_CONTENTS: dict[str, str] = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
"""gRPC's typed ``InferTensorContents`` field for each datatype. FP16 and BF16 have
none: they only travel as raw bytes."""
