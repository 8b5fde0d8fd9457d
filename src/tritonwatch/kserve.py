"""Facts of the KServe v2 / Open Inference Protocol shared by both of its ends here:
the canary's response decoder and the simulator's gRPC server."""

from __future__ import annotations

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
