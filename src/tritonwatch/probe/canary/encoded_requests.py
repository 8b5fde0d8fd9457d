"""Infer requests encoded once and reused while the canary sends the same tensors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from tritonwatch.kserve.payload import Tensor

T = TypeVar("T")


class EncodedRequests(Generic[T]):
    """Requests encoded once per (model, version, form) and reused while the canary sends
    the same tensors (it builds them once): encoding per request was counted in every
    canary latency (benchmarks/RESULTS.md, §4b: the canary against perf_analyzer). The
    tensors are compared by identity, so new tensors (a reload) are encoded afresh."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str, bool], tuple[tuple[Tensor, ...], T]] = {}

    def get(
        self, key: tuple[str, str, bool], tensors: Sequence[Tensor], encode: Callable[[], T]
    ) -> T:
        entry = self._entries.get(key)
        if entry is not None and _same(entry[0], tensors):
            return entry[1]
        encoded = encode()
        self._entries[key] = (tuple(tensors), encoded)
        return encoded


def _same(cached: Sequence[Tensor], given: Sequence[Tensor]) -> bool:
    return len(cached) == len(given) and all(a is b for a, b in zip(cached, given, strict=True))
