"""StreamBoard: TTFT and ITL histograms, output tokens and window quantiles per series."""

from __future__ import annotations

import pytest

from tritonwatch.records.observations import Outcome, StreamResult
from tritonwatch.state import stream_board
from tritonwatch.state.canary_board import DEFAULT_BUCKETS, latency_buckets
from tritonwatch.state.stream_board import ITL_DEFAULT_BUCKETS, StreamBoard, StreamSnapshot

KEY = ("t", "m", "http")


def stream(
    at: float,
    ttft: float | None,
    gaps: tuple[float, ...],
    *,
    tokens: int | None = None,
    outcome: Outcome = Outcome.SUCCESS,
    key: tuple[str, str, str] = KEY,
) -> StreamResult:
    count = len(gaps) + 1 if tokens is None else tokens
    return StreamResult(*key, at, outcome, ttft, gaps, count, 1.0, None)


def only(stats: StreamBoard, now: float) -> StreamSnapshot:
    (snapshot,) = stats.snapshot(now)
    return snapshot


def test_histograms_count_each_first_token_and_each_gap_in_its_bucket() -> None:
    """TTFT has one observation per stream, ITL one per gap, le inclusive, sums exact."""
    stats = StreamBoard(ttft_buckets=(0.1, 0.5), itl_buckets=(0.01, 0.05))
    stats.declare([KEY])
    stats.record(stream(1.0, 0.1, (0.01, 0.02, 0.25), tokens=4))
    stats.record(stream(2.0, 0.75, (0.05,), tokens=2))
    snap = only(stats, 2.0)
    assert snap.ttft.bucket_counts == (1, 1, 2)
    assert snap.ttft.count == 2
    assert snap.ttft.sum == pytest.approx(0.85)
    assert snap.itl.bucket_counts == (1, 3, 4)
    assert snap.itl.count == 4
    assert snap.itl.sum == pytest.approx(0.33)
    assert snap.output_tokens == 6


def test_failed_streams_count_their_tokens_but_feed_no_histogram() -> None:
    """Only successful streams are timed; tokens a failing stream got still count."""
    stats = StreamBoard()
    stats.declare([KEY])
    stats.record(stream(1.0, 0.2, (0.01,), tokens=3, outcome=Outcome.HTTP_ERROR))
    stats.record(stream(1.0, None, (), tokens=0, outcome=Outcome.TIMEOUT))
    snap = only(stats, 1.0)
    assert snap.ttft.count == 0
    assert snap.itl.count == 0
    assert snap.ttft.bucket_counts == (0,) * (len(DEFAULT_BUCKETS) + 1)
    assert snap.itl.bucket_counts == (0,) * (len(ITL_DEFAULT_BUCKETS) + 1)
    assert snap.window_quantiles == {"ttft": {"1m": {}, "5m": {}}, "itl": {"1m": {}, "5m": {}}}
    assert snap.output_tokens == 3


def test_window_quantiles_per_measure_and_window() -> None:
    """1m holds the last minute only, 5m everything since; nearest-rank values."""
    stats = StreamBoard()
    stats.declare([KEY])
    stats.record(stream(100.0, 0.9, (0.09,)))  # 250 s before now: 5m only
    for i in range(1, 11):
        stats.record(stream(340.0 + i, i / 100, (i / 1000, i / 1000)))
    snap = only(stats, 350.0)
    ttft, itl = snap.window_quantiles["ttft"], snap.window_quantiles["itl"]
    assert ttft["1m"] == {0.5: 0.05, 0.9: 0.09, 0.95: 0.1, 0.99: 0.1}
    assert ttft["5m"] == {0.5: 0.06, 0.9: 0.1, 0.95: 0.9, 0.99: 0.9}
    assert itl["1m"] == {0.5: 0.005, 0.9: 0.009, 0.95: 0.01, 0.99: 0.01}
    assert itl["5m"][0.99] == 0.09


def test_samples_older_than_five_minutes_leave_the_windows_not_the_histograms() -> None:
    """The window deques are pruned by age; the cumulative histograms never are."""
    stats = StreamBoard()
    stats.declare([KEY])
    stats.record(stream(0.0, 0.5, (0.5,)))
    stats.record(stream(400.0, 0.25, (0.25,)))
    snap = only(stats, 400.0)
    assert snap.window_quantiles["ttft"]["5m"] == {0.5: 0.25, 0.9: 0.25, 0.95: 0.25, 0.99: 0.25}
    assert snap.window_quantiles["itl"]["5m"][0.5] == 0.25
    assert snap.ttft.count == 2
    assert snap.itl.count == 2


def test_the_gap_window_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long stream cannot grow the gap deque beyond its cap; the histogram counts all."""
    monkeypatch.setattr(stream_board, "GAP_WINDOW_CAP", 3)
    stats = StreamBoard()
    stats.declare([KEY])
    stats.record(stream(1.0, 0.1, (0.5, 0.5, 0.001, 0.002, 0.003)))
    snap = only(stats, 1.0)
    assert snap.itl.count == 5
    assert snap.window_quantiles["itl"]["5m"] == {0.5: 0.002, 0.9: 0.003, 0.95: 0.003, 0.99: 0.003}


def test_new_buckets_restart_the_series_and_the_same_ones_keep_it() -> None:
    """A reload with new SLO thresholds is a new histogram; an unchanged one keeps counts."""
    stats = StreamBoard()
    stats.declare([KEY])
    stats.record(stream(1.0, 0.1, (0.01,)))
    stats.set_buckets(ttft=stats.ttft_buckets, itl=stats.itl_buckets)
    assert only(stats, 1.0).ttft.count == 1
    ttft = latency_buckets([0.5])
    itl = latency_buckets([0.04], ITL_DEFAULT_BUCKETS)
    stats.set_buckets(ttft=ttft, itl=itl)
    assert stats.snapshot(1.0) == []  # declared again by the owner after a reload
    stats.declare([KEY])
    stats.record(stream(2.0, 0.5, (0.04,)))
    snap = only(stats, 2.0)
    assert stats.itl_buckets == itl
    assert 0.04 in itl and 0.04 not in ITL_DEFAULT_BUCKETS
    assert len(snap.itl.bucket_counts) == len(itl) + 1
    assert snap.itl.bucket_counts[itl.index(0.04)] == 1  # le="0.04" holds the gap exactly
    assert snap.ttft.bucket_counts[ttft.index(0.5)] == 1


def test_declare_keeps_only_the_configured_series() -> None:
    """Removed canaries disappear; a late result of one is dropped, new ones start at zero."""
    other = ("t", "m2", "grpc")
    stats = StreamBoard()
    stats.declare([KEY, other])
    stats.record(stream(1.0, 0.1, (), key=other))
    stats.declare([KEY])
    stats.record(stream(1.0, 0.1, (), key=other))
    stats.record(stream(1.0, 0.1, (), key=("t", "gone", "http")))
    assert [(s.target, s.model, s.protocol) for s in stats.snapshot(1.0)] == [KEY]
    assert only(stats, 1.0).ttft.count == 0


def test_token_rate_covers_the_window_or_the_time_since_the_first_stream() -> None:
    """Breaks if output tokens/s divides by the whole window for a series younger than
    it, forgets failed streams' tokens, or keeps streams that ended before the window."""
    stats = StreamBoard()
    stats.declare([KEY])
    assert only(stats, 5.0).output_tokens_per_second == {}
    stats.record(stream(10.0, 0.1, (0.01,) * 3, tokens=4))  # sent at 9.0 (total 1 s)
    stats.record(stream(20.0, None, (), tokens=6, outcome=Outcome.HTTP_ERROR))
    assert only(stats, 21.0).output_tokens_per_second == {"1m": 10 / 12, "5m": 10 / 12}
    stats.record(stream(300.0, 0.1, (0.01,) * 4, tokens=5))  # in the 5m window, not the 1m
    stats.record(stream(399.0, 0.1, (0.01,) * 2, tokens=3))
    assert only(stats, 400.0).output_tokens_per_second == {"1m": 3 / 60, "5m": 8 / 300}
