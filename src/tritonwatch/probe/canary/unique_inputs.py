"""Input bytes that differ in every request: the canary of a cached model measures the model.

Triton's response cache answers a request whose inputs it has seen from memory (a hit,
a fraction of a millisecond). A canary that sends the same bytes every time measures
the cache, not the model (docs/design.md §4b). With ``canary.cache: miss`` (the
default) each request carries a counter, written into the first elements of its first
input in a form valid for that input's datatype, the rest of the input unchanged:

* FP32, FP64: each element one base-2**24 digit ``d`` as ``d / 2**24`` (exact, in
  [0, 1) like the canary's random floats); 2 elements;
* FP16: base 2**11 as ``d / 2**11``, 3 elements; BF16: base 2**8 as ``d / 2**8``, 4;
* integers: decimal digits 0..9, 10 elements (valid in every integer type);
* BOOL: binary digits, 32 elements;
* BYTES: the counter's decimal text written over the start of the first element.

That is at least 2**32 distinct requests (BYTES: unbounded) when the input has as
many elements: more than a canary sends in years. An input with fewer elements
holds fewer (``base ** elements``: a one-element BOOL input only 2), so the counter
wraps there and requests repeat: the cache then serves some of them and the canary's
latency mixes hits with the model's time. :attr:`UniqueInputs.capacity` says how many
there are; the canary logs ``canary_cache_repeats`` when it is below a day's requests.
The counter starts at a random value, so a restarted daemon does not replay the
requests the server cached from its last run.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import replace

from tritonwatch.kserve.payload import Tensor
from tritonwatch.wire.datatypes import bytes_elements, item_size, pack, serialize_bytes

_DIGITS: dict[str, tuple[int, float, int]] = {
    "FP32": (2**24, 2.0**-24, 2),
    "FP64": (2**24, 2.0**-24, 2),
    "FP16": (2**11, 2.0**-11, 3),
    "BF16": (2**8, 2.0**-8, 4),
    "BOOL": (2, 1.0, 32),
}
"""datatype → (digit base, scale of a digit's value, elements used at most)."""
_INTEGER_DIGITS = (10, 1.0, 10)


class UniqueInputs:
    """Makes each request's tensors from ``tensors``, the first input's first elements
    holding a counter (module docstring). Not thread-safe: one sending thread calls it."""

    def __init__(self, tensors: Sequence[Tensor], start: int | None = None) -> None:
        """``start``: the counter's first value (random when None)."""
        self._tensors = tuple(tensors)
        self._at = (
            int.from_bytes(os.urandom(4), "little") if start is None else start
        )  # a restarted daemon sends no request of its last run
        first = self._tensors[0] if self._tensors else None
        self._base, self._scale, self._width = 1, 1.0, 0
        if first is None or not math.prod(first.shape):
            return
        if first.datatype == "BYTES":
            self._width = 1
            return
        base, scale, most = _DIGITS.get(first.datatype, _INTEGER_DIGITS)
        self._base, self._scale = base, scale
        self._width = min(most, math.prod(first.shape))

    @property
    def capacity(self) -> int | None:
        """How many distinct requests it makes before they repeat (None: no limit)."""
        if not self._tensors or not self._width:
            return 1
        if self._tensors[0].datatype == "BYTES":
            return None
        return int(self._base**self._width)

    def next(self) -> tuple[Tensor, ...]:
        """The next request's tensors (the counter moves on by one)."""
        count, self._at = self._at, self._at + 1
        if not self._width:
            return self._tensors
        first = self._tensors[0]
        if first.datatype == "BYTES":
            elements = list(bytes_elements(first.raw))
            text = str(count).encode()
            elements[0] = text + elements[0][len(text) :]
            raw = serialize_bytes(elements)
        else:
            digits = []
            for _ in range(self._width):
                count, digit = divmod(count, self._base)
                digits.append(digit * self._scale if self._scale != 1.0 else digit)
            written = pack(first.datatype, digits)
            raw = written + first.raw[self._width * item_size(first.datatype) :]
        return (replace(first, raw=raw), *self._tensors[1:])
