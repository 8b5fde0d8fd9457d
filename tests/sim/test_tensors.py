"""Tensor encodings (checked against tritonclient's own) and input validation messages."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

from tritonwatch.sim.errors import SimError
from tritonwatch.sim.tensors import (
    check_inputs,
    compute_outputs,
    decode_binary,
    decode_json,
    encode_binary,
    serialize_bytes,
)
from tritonwatch.sim.testing import builtin_model

pytestmark = pytest.mark.sim

SIMPLE = builtin_model("simple")


def test_bytes_encoding_matches_tritonclient() -> None:
    """Our BYTES wire format is byte-for-byte tritonclient's, both ways."""
    array = np.array([b"a", b"", "héllo".encode(), b"\x00\x01"], dtype=np.object_)
    ours = serialize_bytes(array)
    assert ours == serialize_byte_tensor(array).item()
    assert list(decode_binary("x", "BYTES", [4], ours)) == list(deserialize_bytes_tensor(ours))


def test_numeric_binary_and_json_decode_to_the_same_array() -> None:
    """Raw little-endian bytes and nested JSON data give the same array."""
    expected = np.arange(6, dtype=np.int32).reshape(2, 3)
    assert np.array_equal(decode_binary("x", "INT32", [2, 3], expected.tobytes()), expected)
    assert np.array_equal(decode_json("x", "INT32", [2, 3], [[0, 1, 2], [3, 4, 5]]), expected)
    assert encode_binary("INT32", expected) == expected.tobytes()


def test_wrong_byte_size_is_an_invalid_argument() -> None:
    """Binary data that does not fill the shape is rejected with sizes named."""
    with pytest.raises(SimError, match="expected 24 bytes for shape \\[2, 3\\] of INT32, got 20"):
        decode_binary("x", "INT32", [2, 3], b"\0" * 20)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (
            {"INPUT0": ("INT32", (1, 16))},
            "expected 2 inputs but got 1 inputs for model 'simple'",
        ),
        (
            {"INPUT0": ("FP32", (1, 16)), "INPUT1": ("INT32", (1, 16))},
            "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'",
        ),
        (
            {"INPUT0": ("INT32", (1, 8)), "INPUT1": ("INT32", (1, 8))},
            "unexpected shape for input 'INPUT0' for model 'simple'. Expected \\[-1,16\\], got \\[1,8\\]",
        ),
        (
            {"INPUT0": ("INT32", (9, 16)), "INPUT1": ("INT32", (9, 16))},
            "inference request batch-size must be <= 8 for 'simple'",
        ),
        (
            {"INPUT0": ("INT32", (1, 16)), "INPUT1": ("INT32", (1, 16)), "EXTRA": ("INT32", (1,))},
            "expected 2 inputs but got 3 inputs for model 'simple'. Got input\\(s\\) "
            "\\['INPUT0','INPUT1','EXTRA'\\], but missing required input\\(s\\) \\[\\]",
        ),
        (
            {"INPUT0": ("INT32", (1, 16)), "EXTRA": ("INT32", (1, 16))},
            "unexpected inference input 'EXTRA' for model 'simple'",
        ),
    ],
)
def test_invalid_inputs_are_rejected_like_triton(
    inputs: dict[str, tuple[str, tuple[int, ...]]], message: str
) -> None:
    """Each kind of bad input fails with INVALID_ARG and a Triton-like message."""
    with pytest.raises(SimError, match=message) as caught:
        check_inputs(SIMPLE, inputs)
    assert caught.value.code.http_status == 400


def test_simple_model_adds_and_subtracts() -> None:
    """OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1, row by row."""
    first = np.arange(32, dtype=np.int32).reshape(2, 16)
    second = np.full((2, 16), 3, dtype=np.int32)
    batch = check_inputs(SIMPLE, {"INPUT0": ("INT32", (2, 16)), "INPUT1": ("INT32", (2, 16))})
    outputs = compute_outputs(SIMPLE, {"INPUT0": first, "INPUT1": second}, batch)
    assert batch == 2
    assert np.array_equal(outputs["OUTPUT0"], first + 3)
    assert np.array_equal(outputs["OUTPUT1"], first - 3)
