"""The stdlib tensor codec against numpy (and ml_dtypes, tritonclient), which it replaced.

wire/datatypes.py packs the canary's requests and checks its answers without numpy;
these tests hold it to what ``np.array(values, dtype)``, ``ml_dtypes`` and
``tritonclient.utils`` make of the same values: the same bytes, the same refusals.
"""

from __future__ import annotations

import math
import random
import struct
import warnings
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.utils import serialize_byte_tensor, triton_to_np_dtype

from tritonwatch.wire.datatypes import (
    ITEM_SIZES,
    TRITON_DATATYPES,
    ElementError,
    bf16_bits,
    bytes_elements,
    element_count,
    pack,
    serialize_bytes,
    unpack,
    zeros,
)

NUMERIC = sorted(TRITON_DATATYPES - {"BYTES"})


def _numpy(datatype: str, values: list[Any]) -> bytes | None:
    """numpy's bytes for ``values``, or None where numpy refuses them."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            array = np.array(values, dtype=triton_to_np_dtype(datatype))
    except (OverflowError, ValueError, TypeError):
        return None
    return array.astype(array.dtype.newbyteorder("<")).tobytes()


def _ours(datatype: str, values: list[Any]) -> bytes | None:
    try:
        return pack(datatype, values)
    except ElementError:
        return None


EDGES: list[Any] = [0, 1, -1, 1.5, -1.7, -0.5, -1.5, 100, 127, 128, -128, -129, 200.0, 255, 256,
    300, 65504, 65519.0, 65520.0, 70000, 2**31 - 1, 2**31, 2**32, -(2**31) - 1, 2**53 + 1,
    2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 9.3e18, 1.9e19, 1e10, 1e30,
    1e39, -1e39, 3.4e38, 3.39e38, 1e300, 10**39, 10**400, 1 + 2**-8 + 2**-30, 1.00390625,
    5.96e-8, 3e-8, 1e-45, float("inf"), float("-inf"), float("nan")]  # fmt: skip
"""Values at every boundary numpy's conversion has (ranges, truncation, rounding, inf)."""


@pytest.mark.parametrize("datatype", NUMERIC)
@pytest.mark.parametrize("value", EDGES, ids=repr)
def test_pack_converts_and_refuses_as_numpy_does(datatype: str, value: Any) -> None:
    """Breaks if a value numpy stored (or refused) for a datatype is stored otherwise (or
    accepted) by the stdlib codec: the decoder would call other answers bad."""
    if datatype == "BOOL":
        value = bool(value)
    assert _ours(datatype, [value]) == _numpy(datatype, [value])


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(NUMERIC), st.lists(st.integers() | st.floats(), max_size=4))
def test_pack_agrees_with_numpy_on_any_numbers(datatype: str, values: list[Any]) -> None:
    """Breaks if any mix of integers and floats converts otherwise than with numpy."""
    if datatype == "BOOL":
        values = [bool(v) for v in values]
    assert _ours(datatype, values) == _numpy(datatype, values)


def test_bf16_rounds_to_nearest_even_as_ml_dtypes() -> None:
    """Breaks if BF16 truncates, or rounds ties away from even, or loses NaN or inf:
    checked on 20 000 random FP32 bit patterns and the edges."""
    rng = random.Random(1)
    patterns = [rng.getrandbits(32) for _ in range(20_000)]
    patterns += [0x3F808000, 0x3F818000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0x7FC00000, 0x1]
    singles = np.array(patterns, dtype=np.uint32).view(np.float32)
    with np.errstate(all="ignore"):
        expected = singles.astype(ml_dtypes.bfloat16).view(np.uint16).tolist()
    ours = [bf16_bits(float(value)) for value in singles]
    nan = [math.isnan(float(value)) for value in singles]
    assert [o for o, n in zip(ours, nan, strict=True) if not n] == [
        e for e, n in zip(expected, nan, strict=True) if not n
    ]
    assert all(o & 0x7FC0 == 0x7FC0 for o, n in zip(ours, nan, strict=True) if n)


@pytest.mark.parametrize("datatype", NUMERIC)
def test_unpack_reads_back_what_numpy_wrote(datatype: str) -> None:
    """Breaks if the JSON body's values differ from numpy's ``tolist`` of the same bytes."""
    array = np.array([0, 1, 2, 100], dtype=triton_to_np_dtype(datatype))
    raw = array.tobytes()
    widened = array.astype(np.float32) if datatype in ("FP16", "BF16") else array
    assert unpack(datatype, raw) == widened.tolist()
    assert element_count(datatype, raw) == 4
    assert zeros(datatype, 3) == np.zeros(3, dtype=triton_to_np_dtype(datatype)).tobytes()
    assert ITEM_SIZES[datatype] == np.dtype(triton_to_np_dtype(datatype)).itemsize


def test_bytes_serialize_as_tritonclient_and_parse_back() -> None:
    """Breaks if BYTES elements lose their 4-byte little-endian lengths, or a cut one passes."""
    items = [b"hi", b"", b"\xff\x00" * 300, "Grüße".encode()]
    array = np.empty(len(items), dtype=np.object_)
    array[:] = items
    raw = serialize_bytes(items)
    assert raw == serialize_byte_tensor(array).item()
    assert list(bytes_elements(raw)) == items
    assert unpack("BYTES", raw) == items
    assert element_count("BYTES", raw) == 4
    for cut in (raw[:3], raw[:-1], struct.pack("<I", 9) + b"abc"):
        with pytest.raises(ElementError):
            element_count("BYTES", cut)


def test_a_ragged_buffer_is_no_tensor() -> None:
    """Breaks if 6 bytes pass for FP32 elements (numpy's frombuffer refused them)."""
    with pytest.raises(ElementError, match="6 bytes is no whole number of FP32 elements"):
        element_count("FP32", b"\0" * 6)
    with pytest.raises(ElementError):
        unpack("INT64", b"\0" * 7)
