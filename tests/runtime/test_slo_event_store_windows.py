"""BucketRing's running totals: the same answers as summing the buckets one by one."""

from __future__ import annotations

import math
import random

import pytest

from tritonwatch.analysis.slo import EventCounts
from tritonwatch.runtime.slo_event_store import BucketRing

MINUTE = 60.0
BASE = 28_000_000 * MINUTE


class _Reference:
    """The ring's contract written the slow way: a dict of buckets, the ``capacity``
    newest kept, every window summed bucket by bucket."""

    def __init__(self, resolution: float, capacity: int) -> None:
        self.resolution, self.capacity = resolution, capacity
        self.buckets: dict[int, list[float]] = {}

    def add(self, at: float, bad: float, total: float) -> None:
        bucket = math.floor(at / self.resolution)
        newest = max(self.buckets, default=bucket)
        if bucket <= newest - self.capacity:
            return
        newest = max(newest, bucket)
        self.buckets = {b: v for b, v in self.buckets.items() if b > newest - self.capacity}
        held = self.buckets.setdefault(bucket, [0.0, 0.0])
        held[0] += bad
        held[1] += total

    def counts(self, start: float, end: float) -> EventCounts:
        first, last = math.floor(start / self.resolution), math.floor(end / self.resolution)
        share = ((first + 1) * self.resolution - start) / self.resolution
        bad = total = 0.0
        for bucket, (b, t) in self.buckets.items():
            if first <= bucket <= last:
                weight = share if bucket == first else 1.0
                bad, total = bad + weight * b, total + weight * t
        return EventCounts(bad, total)


def _close(got: EventCounts, want: EventCounts) -> bool:
    return math.isclose(got.bad, want.bad, rel_tol=1e-12, abs_tol=1e-9) and math.isclose(
        got.total, want.total, rel_tol=1e-12, abs_tol=1e-9
    )


@pytest.mark.parametrize("capacity", [50, 100])
def test_windows_of_every_length_and_wrap_agree_with_the_bucket_sums(capacity: int) -> None:
    """Fails when a window that spans the whole ring, lies beyond its newest bucket or
    starts before its oldest, or a late, out-of-order or overwritten bucket, loses or
    double-counts events."""
    generator = random.Random(15)
    ring, reference = BucketRing(MINUTE, capacity), _Reference(MINUTE, capacity)
    for step in range(400):  # gaps, repeats, late buckets and several trips round the ring
        at = BASE + (step * 0.4 + generator.uniform(-60, 5)) * MINUTE
        bad, total = generator.randint(0, 3), generator.randint(3, 9) + 0.5
        ring.add(at, bad=bad, total=total)
        reference.add(at, bad=bad, total=total)
        if step % 20:
            continue
        for _ in range(100):
            end = BASE + generator.uniform(step * 0.4 - 70, step * 0.4 + 20) * MINUTE
            whole = capacity * MINUTE
            length = generator.choice([0.0, 30.0, 300.0, 3000.0, whole - MINUTE, whole, 1e5])
            length = length or generator.uniform(0, 80 * MINUTE)
            got, want = ring.counts(end - length, end), reference.counts(end - length, end)
            assert _close(got, want), (step, end, length, got, want)


def test_a_long_silence_empties_the_ring_and_merge_matches_adding() -> None:
    """Fails when a gap longer than the ring leaves old events behind or is filled bucket
    by bucket, or when merging one ring into another (the state file's load) differs
    from adding the same events."""
    ring = BucketRing(MINUTE, 10)
    ring.add(BASE, bad=5, total=5)
    ring.add(BASE + 30 * MINUTE, bad=0, total=7)
    assert ring.counts(BASE - 3600, BASE + 3600) == EventCounts(0.0, 7.0)
    far = BASE + 1e16  # a wall clock set wrong: filling the gap bucket by bucket would not fit
    ring.add(far, bad=1, total=2)
    assert ring.counts(far - 3600, far) == EventCounts(1.0, 2.0)

    generator = random.Random(7)
    events = [
        (BASE + generator.uniform(0, 40) * MINUTE, generator.randint(0, 2), generator.randint(2, 5))
        for _ in range(60)
    ]
    added, early, late = BucketRing(MINUTE, 25), BucketRing(MINUTE, 25), BucketRing(MINUTE, 25)
    for at, bad, total in events:
        added.add(at, bad, total)
    for at, bad, total in events[:30]:
        early.add(at, bad, total)
    for at, bad, total in events[30:]:
        late.add(at, bad, total)
    late.merge(early)
    reference = _Reference(MINUTE, 25)
    for at, bad, total in sorted(events):
        reference.add(at, bad, total)
    for minutes in (1, 5, 24, 25, 60):
        end = BASE + 41 * MINUTE
        want = reference.counts(end - minutes * MINUTE, end)
        assert _close(late.counts(end - minutes * MINUTE, end), want)
        assert _close(added.counts(end - minutes * MINUTE, end), want)


def test_memory_stays_bounded_and_totals_stay_small_over_many_trips() -> None:
    """Fails when the running totals keep more than capacity + 1 entries (and the few
    left to drop in a batch), when those few are still counted or saved, or when the
    totals grow with the uptime instead of being rebased (losing precision after months)."""
    ring = BucketRing(MINUTE, 100)
    for minute in range(3_000):
        ring.add(BASE + minute * MINUTE, bad=0.1, total=1000.1)
        assert len(ring._total) <= 100 + 1 + 100 // 32
        held = min(minute + 1, 100)  # those waiting to be dropped are not counted
        everything = ring.counts(0.0, BASE + minute * MINUTE)
        assert math.isclose(everything.total, held * 1000.1, rel_tol=1e-12)
        assert len(ring.to_document()["total"]) == held
    assert ring._total[-1] < 3 * 100 * 1000.1
    end = BASE + 2_999 * MINUTE + 30
    counts = ring.counts(end - 5 * MINUTE, end)
    assert math.isclose(counts.total, 5.5 * 1000.1, rel_tol=1e-12)  # half of the oldest
    assert math.isclose(counts.bad, 0.55, rel_tol=1e-9)
