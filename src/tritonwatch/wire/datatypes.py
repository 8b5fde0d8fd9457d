"""Triton's tensor datatypes as bytes, with the standard library only.

The canary sends bytes and checks that answers are well formed; it never computes
with a tensor. ``numpy`` (with ``ml_dtypes`` for BF16, both pulled in by
``tritonclient.utils``) cost the daemon about 16 MiB of its 60 MiB goal for that, so
elements are packed and unpacked here with :mod:`struct`: little-endian, as Triton's
binary tensor extension and gRPC's raw contents carry them. FP16 is struct's ``e``;
BF16 is the top half of FP32's bits, rounded to nearest even as ``ml_dtypes`` rounds.

:func:`pack` converts Python values as ``np.array(values, dtype)`` does (the decoder
used it until now; tests/wire/test_datatypes.py holds the two side by side): floats
into integer types truncate toward zero, integers out of range are refused, floats
too large for FP16, FP32 or BF16 become ±inf (numpy's overflow, which the decoder
ignored). Whoever needs an ``ndarray`` (sample files, the gRPC client, tests) makes
one from these bytes: :meth:`~tritonwatch.kserve.payload.Tensor.data`.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Sequence

TRITON_DATATYPES = frozenset(
    {
        "BOOL",
        "UINT8",
        "UINT16",
        "UINT32",
        "UINT64",
        "INT8",
        "INT16",
        "INT32",
        "INT64",
        "FP16",
        "FP32",
        "FP64",
        "BF16",
        "BYTES",
    }
)
_CODES = {
    "BOOL": "?",
    "INT8": "b",
    "UINT8": "B",
    "INT16": "h",
    "UINT16": "H",
    "INT32": "i",
    "UINT32": "I",
    "INT64": "q",
    "UINT64": "Q",
    "FP16": "e",
    "FP32": "f",
    "FP64": "d",
    "BF16": "H",
}
"""struct's format character for each fixed-size datatype (BF16: its 16 bits)."""
ITEM_SIZES = {datatype: struct.calcsize("<" + code) for datatype, code in _CODES.items()}
"""Bytes per element of each fixed-size datatype (every one but BYTES)."""
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_INTEGER_RANGES = {
    name: (
        (-(2 ** (8 * ITEM_SIZES[name] - 1)), 2 ** (8 * ITEM_SIZES[name] - 1) - 1)
        if name.startswith("INT")
        else (0, 2 ** (8 * ITEM_SIZES[name]) - 1)
    )
    for name in ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64")
}
_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")
_LENGTH = struct.Struct("<I")


class ElementError(ValueError):
    """Values or bytes that are no tensor of the datatype (numpy refused the same)."""


def item_size(datatype: str) -> int:
    """Bytes per element; BYTES elements have no fixed size (KeyError)."""
    return ITEM_SIZES[datatype]


def zeros(datatype: str, count: int) -> bytes:
    """``count`` zero elements (0, 0.0 or False: all bits clear in every datatype)."""
    return bytes(count * ITEM_SIZES[datatype])


def pack(datatype: str, values: Sequence[object]) -> bytes:
    """``values`` as ``datatype`` elements, converted as ``np.array(values, dtype)`` would.

    Raises:
        ElementError: a value the datatype cannot hold (300 as INT8, NaN as INT32, an
            integer beyond FP64), naming it.
    """
    count = len(values)
    if datatype == "BOOL":
        return bytes(1 if value else 0 for value in values)
    if datatype in _INTEGER_RANGES:
        low, high = _INTEGER_RANGES[datatype]
        integers = [_integer(value, low, high, datatype) for value in values]
        return struct.pack(f"<{count}{_CODES[datatype]}", *integers)
    floats = [_float(value, datatype) for value in values]
    if datatype == "BF16":
        return struct.pack(f"<{count}H", *(bf16_bits(value) for value in floats))
    if datatype == "FP64":
        return struct.pack(f"<{count}d", *floats)
    if datatype not in ("FP16", "FP32"):
        raise ElementError(f"{datatype} has no fixed-size elements")
    try:
        return struct.pack(f"<{count}{_CODES[datatype]}", *floats)
    except OverflowError:  # one is too large: it becomes ±inf, as numpy's cast makes it
        code = _CODES[datatype]
        return b"".join(_pack_or_infinity(code, value) for value in floats)


def _pack_or_infinity(code: str, value: float) -> bytes:
    try:
        return struct.pack("<" + code, value)
    except OverflowError:
        return struct.pack("<" + code, math.copysign(math.inf, value))


def _integer(value: object, low: int, high: int, datatype: str) -> int:
    if isinstance(value, float):
        if math.isnan(value):
            raise ElementError("cannot convert float NaN to integer")
        if math.isinf(value):
            raise ElementError("cannot convert float infinity to integer")
        value = int(value)  # toward zero, as numpy truncates
    if not isinstance(value, int):
        raise ElementError(f"{type(value).__name__} is no number")
    if not low <= value <= high:
        raise ElementError(f"{value} is out of bounds for {datatype}")
    return value


def _float(value: object, datatype: str) -> float:
    if datatype == "BF16" and isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
        raise ElementError(f"{value} is out of range for BF16")  # ml_dtypes refuses it too
    if not isinstance(value, int | float):
        raise ElementError(f"{type(value).__name__} is no number")
    try:
        return float(value)
    except OverflowError:  # an integer beyond FP64
        raise ElementError(f"{str(value)[:40]} is too large for a float") from None


def bf16_bits(value: float) -> int:
    """The BF16 nearest ``value`` rounded to FP32 first (ties to even), as ``ml_dtypes``."""
    try:
        single = _F32.pack(value)
    except OverflowError:
        single = _F32.pack(math.copysign(math.inf, value))
    bits = int(_U32.unpack(single)[0])
    if bits & 0x7F800000 == 0x7F800000 and bits & 0x007FFFFF:  # NaN: keep it quiet
        return (bits >> 16) | 0x0040
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16


def unpack(datatype: str, raw: bytes) -> list[object]:
    """The elements of ``raw`` as Python values (BF16 and FP16 as floats; BYTES as bytes).

    Raises:
        ElementError: ``raw`` is no whole number of elements.
    """
    if datatype == "BYTES":
        return list(bytes_elements(raw))
    size = ITEM_SIZES[datatype]
    if len(raw) % size:
        raise ElementError(f"{len(raw)} bytes is no whole number of {datatype} elements")
    count = len(raw) // size
    values = struct.unpack(f"<{count}{_CODES[datatype]}", raw)
    if datatype == "BF16":
        return [_F32.unpack(_U32.pack(bits << 16))[0] for bits in values]
    return list(values)


def element_count(datatype: str, raw: bytes) -> int:
    """How many elements ``raw`` holds.

    Raises:
        ElementError: ``raw`` is no whole number of elements (or BYTES data is cut).
    """
    if datatype == "BYTES":
        return sum(1 for _ in bytes_elements(raw))
    size = ITEM_SIZES[datatype]
    if len(raw) % size:
        raise ElementError(f"{len(raw)} bytes is no whole number of {datatype} elements")
    return len(raw) // size


def serialize_bytes(elements: Iterable[bytes]) -> bytes:
    """BYTES elements as Triton carries them: each a 4-byte little-endian length, then its
    bytes (``tritonclient.utils.serialize_byte_tensor``'s output)."""
    return b"".join(_LENGTH.pack(len(element)) + element for element in elements)


def bytes_elements(raw: bytes) -> Iterable[bytes]:
    """The elements of serialized BYTES data, in order.

    Raises:
        ElementError: the data ends inside a length or an element.
    """
    position, end = 0, len(raw)
    while position < end:
        if position + 4 > end:
            raise ElementError("BYTES data cut inside a length")
        (length,) = _LENGTH.unpack_from(raw, position)
        position += 4
        if position + length > end:
            raise ElementError("BYTES element runs past the data")
        yield bytes(raw[position : position + length])
        position += length
