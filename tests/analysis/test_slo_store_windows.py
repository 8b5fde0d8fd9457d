"""BucketRing.counts reads only the slots of its window: same answers as the whole ring."""

from __future__ import annotations

import random

import numpy as np

from tritonwatch.analysis.slo import EventCounts
from tritonwatch.analysis.slo_store import BucketRing

MINUTE = 60.0
BASE = 28_000_000 * MINUTE


def _whole_ring(ring: BucketRing, start: float, end: float) -> EventCounts:
    """The reference: every slot weighted by whether its bucket lies in [start, end]."""
    ids, bad, total = ring._ids, ring._bad, ring._total
    first, last = int(start // ring.resolution), int(end // ring.resolution)
    share = ((first + 1) * ring.resolution - start) / ring.resolution
    weights = np.where(ids == first, share, 1.0) * ((ids >= first) & (ids <= last))
    return EventCounts(float(bad @ weights), float(total @ weights))


def test_windows_of_every_length_and_wrap_agree_with_the_whole_ring() -> None:
    """Fails when a window that wraps around the ring's end, spans all of it, or lies
    beyond its newest bucket loses or double-counts a slot."""
    generator = random.Random(15)
    ring = BucketRing(MINUTE, 50)
    for _ in range(400):  # gaps, repeats and buckets overwritten several times
        at = BASE + generator.uniform(0, 120) * MINUTE
        ring.add(at, bad=generator.randint(0, 3), total=generator.randint(3, 9) + 0.5)
    for _ in range(2000):
        end = BASE + generator.uniform(-10, 140) * MINUTE
        length = generator.choice([0.0, 30.0, 300.0, 3000.0, 49 * MINUTE, 50 * MINUTE, 1e5])
        length = length or generator.uniform(0, 80 * MINUTE)
        got, want = ring.counts(end - length, end), _whole_ring(ring, end - length, end)
        assert np.isclose(got.bad, want.bad, rtol=1e-12, atol=0)
        assert np.isclose(got.total, want.total, rtol=1e-12, atol=0)
