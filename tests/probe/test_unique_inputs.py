"""Unique input bytes for a cached model's canary (probe/canary/unique_inputs.py)."""

from __future__ import annotations

import pytest

from tritonwatch.kserve.payload import Tensor
from tritonwatch.probe.canary.unique_inputs import UniqueInputs
from tritonwatch.wire.datatypes import pack, serialize_bytes, unpack

REQUESTS = 3000


def _tensor(datatype: str, count: int, value: object = 0) -> Tensor:
    if datatype == "BYTES":
        return Tensor("x", "BYTES", (1, count), serialize_bytes([b"abcdefgh"] * count))
    return Tensor("x", datatype, (1, count), pack(datatype, [value] * count))


WIDTHS = {"FP32": 2, "FP64": 2, "FP16": 3, "BF16": 4, "INT8": 10, "UINT64": 10, "BOOL": 32}
"""Elements each datatype's counter takes (the module docstring's table)."""


@pytest.mark.parametrize(("datatype", "width"), sorted(WIDTHS.items()))
def test_every_request_differs_and_only_the_counters_elements_change(
    datatype: str, width: int
) -> None:
    """Breaks if two of the first requests repeat (the cache would answer the second),
    a written element is no valid value of its type, or an element past the counter
    changes."""
    rest = True if datatype == "BOOL" else 1
    base = _tensor(datatype, 40, rest)
    other = Tensor("y", "INT32", (1, 1), pack("INT32", [5]))
    unique = UniqueInputs([base, other], start=1 << 20)
    made = [unique.next() for _ in range(REQUESTS)]
    assert len({tensors[0].raw for tensors in made}) == REQUESTS
    for first, second in made[:50]:
        assert second is other
        assert (first.name, first.datatype, first.shape) == (base.name, datatype, base.shape)
        values = unpack(datatype, first.raw)
        assert values[width:] == unpack(datatype, base.raw)[width:]
        if datatype.startswith(("FP", "BF")):
            assert all(isinstance(v, float) and 0 <= v < 1 for v in values[:width])
        elif datatype != "BOOL":
            assert all(isinstance(v, int) and 0 <= v <= 9 for v in values[:width])
    assert unique.capacity is not None and unique.capacity >= 2**32


def test_bytes_inputs_start_with_the_counter_and_never_run_out() -> None:
    """Breaks if a BYTES input's first element does not carry the counter, the others
    change, or its capacity is bounded."""
    unique = UniqueInputs([_tensor("BYTES", 3)], start=41)
    first, second = unique.next()[0], unique.next()[0]
    assert unpack("BYTES", first.raw) == [b"41cdefgh", b"abcdefgh", b"abcdefgh"]
    assert unpack("BYTES", second.raw)[0] == b"42cdefgh"
    assert unique.capacity is None


def test_too_small_an_input_wraps_and_says_how_many_it_holds() -> None:
    """Breaks if a one-element BOOL input claims more than two distinct requests, or
    repeats other than after its capacity (the documented wrap)."""
    unique = UniqueInputs([_tensor("BOOL", 1, value=False)], start=0)
    assert unique.capacity == 2
    raws = [unique.next()[0].raw for _ in range(4)]
    assert raws == [b"\x00", b"\x01", b"\x00", b"\x01"]


def test_no_input_to_write_to_sends_the_tensors_as_they_are() -> None:
    """Breaks if an empty first input (nothing to write) is not sent unchanged."""
    empty = Tensor("x", "FP32", (1, 0), b"")
    unique = UniqueInputs([empty])
    assert unique.next() == (empty,)
    assert unique.capacity == 1


def test_a_random_start_differs_between_canaries() -> None:
    """Breaks if the counter starts at a fixed value (a restarted daemon would replay the
    requests its last run left in the server's cache)."""
    starts = {UniqueInputs([_tensor("INT64", 10)]).next()[0].raw for _ in range(8)}
    assert len(starts) > 1
