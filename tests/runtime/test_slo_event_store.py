"""The bucketed event store: hand-computed windows, bounds, and the state file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tritonwatch.analysis.slo import SliSource, SLOKind
from tritonwatch.runtime.slo_event_store import (
    FINE_BUCKETS,
    BucketRing,
    SeriesKey,
    SLOEventStore,
)

KEY = SeriesKey("t", "m", SLOKind.AVAILABILITY, SliSource.CANARY)
OTHER = SeriesKey("t", "m", SLOKind.LATENCY, SliSource.CANARY)
MINUTE = 60.0
BASE = 28_000_000 * MINUTE  # a bucket boundary, in Unix seconds (2023)


def test_window_weights_its_oldest_bucket_by_overlap() -> None:
    """10 events (1 bad) in each of six minutes; "now" is 30 s into the last one, so a
    5-minute window holds the last five buckets whole and half of the sixth."""
    ring = BucketRing(MINUTE, 100)
    for minute in range(6):
        ring.add(BASE + minute * MINUTE + 5, bad=1, total=10)
    now = BASE + 5 * MINUTE + 30
    counts = ring.counts(now - 300, now)
    assert (counts.bad, counts.total) == (5.5, 55.0)
    assert counts.error_ratio == 0.1


def test_window_sees_only_its_own_span() -> None:
    """A 5-minute window leaves out a burst half an hour old; a 1-hour window counts it."""
    ring = BucketRing(MINUTE, 100)
    ring.add(BASE, bad=10, total=10)  # an old burst
    ring.add(BASE + 30 * MINUTE, bad=0, total=100)
    now = BASE + 30 * MINUTE + 59
    assert ring.counts(now - 300, now).total == 100.0
    assert ring.counts(now - 3600, now).bad == 10.0


def test_ring_is_bounded_and_forgets_what_it_cannot_hold() -> None:
    """A 4-bucket ring reused around: bucket 0's slot now holds bucket 4."""
    ring = BucketRing(MINUTE, 4)
    for minute in range(5):
        ring.add(BASE + minute * MINUTE, bad=minute, total=10)
    now = BASE + 4 * MINUTE
    assert ring.counts(now - 10 * MINUTE, now).total == 40.0
    ring.add(BASE, bad=99, total=99)  # older than the ring reaches: ignored
    assert ring.counts(now - 10 * MINUTE, now).bad == 1 + 2 + 3 + 4


def test_long_windows_and_the_period_come_from_the_hour_ring() -> None:
    """A burst five days ago is outside 3d (minute ring) and inside 7d (hour ring)."""
    store = SLOEventStore()
    store.declare([KEY])
    now = BASE + 10 * 86400
    store.add(KEY, now - 5 * 86400, bad=7, total=7)
    store.add(KEY, now - 60, bad=0, total=93)
    assert store.counts(KEY, 3 * 86400, now).total == 93.0
    period = store.counts(KEY, 7 * 86400, now)
    assert (period.bad, period.total) == (7.0, 100.0)


def test_undeclared_keys_are_dropped_and_declare_prunes() -> None:
    """Events for undeclared series are dropped, and declaring prunes the series removed."""
    store = SLOEventStore()
    store.declare([KEY])
    store.add(OTHER, BASE, bad=1, total=1)
    assert store.counts(OTHER, 300, BASE).total == 0.0
    store.add(KEY, BASE, bad=1, total=2)
    store.declare([KEY, OTHER])
    assert store.counts(KEY, 300, BASE).total == 2.0
    store.declare([OTHER])
    assert store.keys() == [OTHER]


def test_state_file_round_trip_keeps_every_window(tmp_path: Path) -> None:
    """Save then load keeps every window's counts and events seen before, leaving no temp file."""
    store = SLOEventStore()
    store.declare([KEY, OTHER])
    for minute in range(0, 3 * 24 * 60, 7):
        store.add(KEY, BASE + minute * MINUTE, bad=minute % 3, total=10.5)
    store.add(OTHER, BASE, bad=1, total=4)
    now = BASE + 3 * 86400 - 1
    path = tmp_path / "state" / "slo-events.json"
    store.save(path, now)

    restored = SLOEventStore()
    restored.declare([KEY])  # OTHER is no longer configured
    assert restored.load(path) == 1
    for span in (300, 3600, 86400, 3 * 86400, 28 * 86400):
        assert restored.counts(KEY, span, now) == store.counts(KEY, span, now)

    late = SLOEventStore()
    late.declare([KEY])
    late.add(KEY, now, bad=1, total=1)  # counted before the load: kept
    late.load(path)
    assert late.counts(KEY, 300, now).total == store.counts(KEY, 300, now).total + 1
    assert not list(tmp_path.glob("state/.*.tmp"))


def test_state_file_stays_small(tmp_path: Path) -> None:
    """Three full days of minute buckets for one series: well under 100 kB."""
    store = SLOEventStore()
    store.declare([KEY])
    for minute in range(FINE_BUCKETS):
        store.add(KEY, BASE + minute * MINUTE, bad=1, total=60)
    path = tmp_path / "s.json"
    store.save(path, BASE + FINE_BUCKETS * MINUTE)
    assert path.stat().st_size < 100_000


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "Expecting property name"),
        ('{"format": "other", "version": 1}', "is not a tritonwatch-slo-events file"),
        ('{"format": "tritonwatch-slo-events", "version": 2}', "of version 1"),
        (
            '{"format": "tritonwatch-slo-events", "version": 1, "series": [{"target": "t"}]}',
            "is damaged",
        ),
    ],
)
def test_a_bad_state_file_is_refused_with_a_reason(
    tmp_path: Path, content: str, message: str
) -> None:
    """A broken, foreign, newer or damaged state file is refused with a reason."""
    path = tmp_path / "s.json"
    path.write_text(content)
    store = SLOEventStore()
    store.declare([KEY])
    with pytest.raises(ValueError, match=message):
        store.load(path)


def test_saved_document_is_dense_and_compact(tmp_path: Path) -> None:
    """The state file keeps empty buckets as 0 so the rest stay aligned, and the SLO kind."""
    store = SLOEventStore()
    store.declare([KEY])
    store.add(KEY, BASE, bad=0, total=3)
    store.add(KEY, BASE + 2 * MINUTE, bad=0.5, total=3)
    path = tmp_path / "s.json"
    store.save(path, BASE + 3 * MINUTE)
    (series,) = json.loads(path.read_text())["series"]
    assert series["fine"]["bad"] == [0, 0, 0.5]
    assert series["fine"]["total"] == [3, 0, 3]
    assert series["slo"] == "availability"


OLD_STATE_FILE = (
    '{"format":"tritonwatch-slo-events","version":1,"saved_at":1680000210.0,"series":[{'
    '"target":"t","model":"m","slo":"availability","source":"canary",'
    '"fine":{"resolution":60.0,"first":27999990,"bad":[2,0,0,0,0,0,0,0,0,1,1,0,0,0.25],'
    '"total":[40,0,0,0,0,0,0,0,0,4,10,12.5,0,9]},'
    '"coarse":{"resolution":3600.0,"first":466666,"bad":[4.25],"total":[75.5]}}]}'
)
"""Written by the numpy ring (before issue 15): events 10 min and 55 s before BASE, then
at BASE + 5 s, + 65 s and + 181 s; saved at BASE + 210 s."""


@pytest.mark.parametrize(
    ("span", "bad", "total"),
    [(240, 1.75, 33.5), (300, 2.25, 35.5), (3600, 4.25, 75.5), (7 * 86400, 4.25, 75.5)],
)
def test_a_state_file_of_the_first_ring_loads_with_the_same_windows(
    tmp_path: Path, span: float, bad: float, total: float
) -> None:
    """Fails when a file the previous daemon wrote no longer loads, or loads into other
    windows than it answered before it stopped (the numbers are the old ring's)."""
    path = tmp_path / "s.json"
    path.write_text(OLD_STATE_FILE)
    store = SLOEventStore()
    store.declare([KEY])
    assert store.load(path) == 1
    counts = store.counts(KEY, span, BASE + 210)
    assert (counts.bad, counts.total) == (bad, total)
    resaved = tmp_path / "again.json"
    store.save(resaved, 1680000210.0)
    assert json.loads(resaved.read_text()) == json.loads(OLD_STATE_FILE)
