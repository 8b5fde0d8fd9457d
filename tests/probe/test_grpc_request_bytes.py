"""The pre-encoded gRPC infer request, built from tritonclient's public protobuf types,
is byte for byte the request tritonclient's own (private) builder makes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tritonwatch.kserve.encoded import grpc_infer_request
from tritonwatch.kserve.payload import Tensor, TensorSpec, build_inputs
from tritonwatch.wire.datatypes import TRITON_DATATYPES

pytestmark = pytest.mark.real

FP32 = Tensor.from_numpy("x", "FP32", np.arange(16, dtype=np.float32).reshape(1, 16))
INT64 = Tensor.from_numpy("ids", "INT64", np.array([[1, -2, 3]], dtype=np.int64))
BYTES = Tensor.from_numpy("text", "BYTES", np.array([[b"hi", b"\xff\x00", b""]], dtype=object))
BATCH_OF_4 = [
    Tensor.from_numpy("INPUT0", "INT32", np.arange(64, dtype=np.int32).reshape(4, 16)),
    Tensor.from_numpy("INPUT1", "INT32", np.ones((4, 16), dtype=np.int32)),
]
EVERY_DATATYPE = build_inputs(
    "m",
    [TensorSpec(f"in_{datatype}", datatype, (4, 3)) for datatype in sorted(TRITON_DATATYPES)],
    {},
    "random",
    seed=5,
    string_length=4,
)
INPUT_SETS = {
    "fp32": [FP32],
    "int64": [INT64],
    "bytes": [BYTES],
    "batch of 4": BATCH_OF_4,
    "mixed": [FP32, INT64, BYTES],
    "bf16": [Tensor.from_numpy("h", "BF16", np.ones((2,), dtype=ml_dtypes.bfloat16))],
    "empty": [Tensor.from_numpy("z", "FP16", np.zeros((0, 3), dtype=np.float16))],
    "every datatype": EVERY_DATATYPE,
}


def _private_builder() -> Callable[..., Any]:
    """tritonclient's own request builder, the oracle; a clear skip once it is gone."""
    try:
        from tritonclient.grpc._utils import _get_inference_request
    except ImportError as error:
        pytest.skip(
            f"tritonclient no longer has grpc._utils._get_inference_request ({error}): "
            "the byte-for-byte oracle is gone; tests/triton/test_sweep_vs_perf_analyzer.py "
            "still sends the request to a real Triton"
        )
    builder: Callable[..., Any] = _get_inference_request
    return builder


def _tritonclient_request(model: str, version: str, tensors: Sequence[Tensor]) -> bytes:
    """What ``InferenceServerClient.infer`` serializes for these tensors, with the
    arguments the sweep and the canary leave at their defaults."""
    inputs = []
    for tensor in tensors:
        infer_input = grpcclient.InferInput(tensor.name, list(tensor.shape), tensor.datatype)
        infer_input.set_data_from_numpy(tensor.data)
        inputs.append(infer_input)
    request = _private_builder()(
        model_name=model, inputs=inputs, model_version=version, request_id="", outputs=None,
        sequence_id=0, sequence_start=False, sequence_end=False, priority=0, timeout=None,
        parameters=None,
    )  # fmt: skip
    return bytes(request.SerializeToString())


@pytest.mark.parametrize("version", ["", "3"])
@pytest.mark.parametrize("tensors", INPUT_SETS.values(), ids=INPUT_SETS.keys())
def test_the_grpc_request_is_byte_for_byte_tritonclients(
    tensors: list[Tensor], version: str
) -> None:
    """Breaks if the request built from the public protobuf types differs in one byte
    (a field, a shape, a datatype, raw contents, the version) from tritonclient's."""
    expected = _tritonclient_request("my_model", version, tensors)
    assert grpc_infer_request("my_model", version, tensors) == expected
