"""Triton's response cache: the server-wide ``local`` cache and its key.

Real Triton caches only when the server is started with a cache
(``--cache-config local,size=BYTES``) *and* the model enables it
(``response_cache {enable: true}``). The key is the model name, its version, and every
input's name and bytes (in name order) — not the request id, its parameters or the
outputs it asks for (Triton core's ``TritonCache::Hash``), so the same bytes sent over
HTTP (JSON or binary) or gRPC hit the same entry. A hit is answered without executing;
a miss executes and its response is inserted. The local cache evicts the least recently
used entries when full.

Durations are modelled, not slept (a lookup is a hash-table probe): a lookup costs
``LOOKUP_BASE_NS`` plus a little per byte, an insertion ``INSERT_BASE_NS`` plus a little
per byte, the order of what real Triton 2.51 reports on a CPU host (tens of µs).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from tritonwatch.sim.tensors import Array

LOOKUP_BASE_NS = 10_000
INSERT_BASE_NS = 15_000
_NS_PER_BYTE = 0.5
ENTRY_OVERHEAD_BYTES = 80
"""What an entry costs beyond its output bytes (real 2.51: 144 bytes for 64 bytes)."""
BASE_BYTES = 128
"""What the empty local cache already uses (real 2.51: ``nv_cache_util`` 128/size)."""


def parse_cache_config(text: str) -> int:
    """Reads Triton's ``--cache-config local,size=BYTES``; returns the size in bytes.

    Raises:
        ValueError: another cache than ``local``, or no positive integer size.
    """
    name, _, settings = text.partition(",")
    if name.strip() != "local":
        raise ValueError(f"only the local cache is simulated: --cache-config {text!r}")
    values = dict(item.partition("=")[::2] for item in settings.split(",") if item)
    size = values.get("size", "")
    if not size.isdigit() or int(size) <= 0:
        raise ValueError(f"--cache-config local needs size=<bytes>, got: {text!r}")
    return int(size)


def _nbytes(array: Array) -> int:
    if array.dtype == np.object_:
        return sum(len(item) if isinstance(item, bytes) else 8 for item in array.flat)
    return int(array.nbytes)


def cache_key(model: str, version: str, inputs: Mapping[str, Array]) -> bytes:
    """Triton's key: model, version, and each input's name and bytes in name order."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (model, version):
        digest.update(part.encode() + b"\0")
    for name in sorted(inputs):
        array = inputs[name]
        digest.update(name.encode() + b"\0")
        if array.dtype == np.object_:
            for item in array.flat:
                raw = item if isinstance(item, bytes) else str(item).encode()
                digest.update(len(raw).to_bytes(8, "little") + raw)
        else:
            digest.update(np.ascontiguousarray(array).tobytes())
    return digest.digest()


@dataclass(frozen=True)
class CacheReading:
    """The server-wide ``nv_cache_*`` gauges, read at a metrics poll."""

    utilization: float
    entries: int
    hits: int
    misses: int
    lookups: int
    evictions: int
    lookup_us: int
    insertion_us: int


class ResponseCache:
    """The ``local`` cache: LRU over whole responses, bounded by ``size_bytes``."""

    def __init__(self, size_bytes: int) -> None:
        self.size_bytes = size_bytes
        self.reset()

    def reset(self) -> None:
        """Empty, every count at zero (a server restart)."""
        self._entries: OrderedDict[bytes, tuple[dict[str, Array], int]] = OrderedDict()
        self._used = BASE_BYTES
        self._hits = self._misses = self._evictions = 0
        self._lookup_ns = self._insert_ns = 0

    def lookup(self, key: bytes, request_bytes: int) -> tuple[dict[str, Array] | None, int]:
        """The cached outputs for ``key`` (None on a miss) and the lookup's duration."""
        duration = LOOKUP_BASE_NS + int(request_bytes * _NS_PER_BYTE)
        self._lookup_ns += duration
        entry = self._entries.get(key)
        if entry is None:
            self._misses += 1
            return None, duration
        self._entries.move_to_end(key)
        self._hits += 1
        return dict(entry[0]), duration

    def insert(self, key: bytes, outputs: Mapping[str, Array]) -> int:
        """Stores a response (evicting the oldest to make room); returns the insertion's
        duration. A response larger than the whole cache is not stored."""
        size = ENTRY_OVERHEAD_BYTES + sum(_nbytes(array) for array in outputs.values())
        duration = INSERT_BASE_NS + int(size * _NS_PER_BYTE)
        self._insert_ns += duration
        if key in self._entries or BASE_BYTES + size > self.size_bytes:
            return duration
        while self._used + size > self.size_bytes and self._entries:
            _, (_, freed) = self._entries.popitem(last=False)
            self._used -= freed
            self._evictions += 1
        self._entries[key] = ({name: np.array(a, copy=True) for name, a in outputs.items()}, size)
        self._used += size
        return duration

    def reading(self) -> CacheReading:
        """The gauges now."""
        return CacheReading(
            utilization=self._used / self.size_bytes,
            entries=len(self._entries),
            hits=self._hits,
            misses=self._misses,
            lookups=self._hits + self._misses,
            evictions=self._evictions,
            lookup_us=self._lookup_ns // 1000,
            insertion_us=self._insert_ns // 1000,
        )


def request_bytes(inputs: Mapping[str, Array]) -> int:
    """The bytes a lookup hashes."""
    return sum(_nbytes(array) for array in inputs.values())
