"""Ledgers and summary windows: cumulative rules, 60 s windows, the statistics shape."""

from __future__ import annotations

import math

import numpy as np
import pytest
from google.protobuf import json_format  # type: ignore[import-untyped]
from tritonclient.grpc import service_pb2

from tritonwatch.sim.faults import (
    ErrorBurst,
    FaultBook,
    LatencySpike,
    MalformedMetrics,
    SlowMetrics,
)
from tritonwatch.sim.stats import Ledger, RequestTimes, SummaryWindow

pytestmark = pytest.mark.sim


def times(request_us: int, queue_us: int = 0) -> RequestTimes:
    return RequestTimes(
        request_us * 1000 + 999, queue_us * 1000, 0, (request_us - queue_us) * 1000, 0
    )


def test_ledger_counts_requests_executions_and_batches() -> None:
    """Successes count requests; executions count batches; inference_count counts rows."""
    ledger = Ledger()
    for _ in range(3):
        ledger.record_success(times(100, queue_us=40))
    ledger.record_execution(3, 10, 200, 5)
    ledger.record_failure("REJECTED", 1000)
    stats = ledger.stats_json("simple", "1")
    assert stats["inference_stats"]["success"] == {"count": 3, "ns": 3 * 100_999}
    assert stats["inference_stats"]["queue"] == {"count": 3, "ns": 120_000}
    assert stats["inference_stats"]["fail"] == {"count": 1, "ns": 1000}
    assert (stats["inference_count"], stats["execution_count"]) == (3, 1)
    assert stats["batch_stats"] == [
        {
            "batch_size": 3,
            "compute_input": {"count": 1, "ns": 10},
            "compute_infer": {"count": 1, "ns": 200},
            "compute_output": {"count": 1, "ns": 5},
        }
    ]
    # Per-request microseconds are rounded down, as Triton's *_duration_us counters are.
    assert ledger.microseconds[0] == 300
    assert ledger.failures_by_reason == {"REJECTED": 1, "CANCELED": 0, "BACKEND": 0, "OTHER": 0}


def test_statistics_json_parses_as_the_grpc_message() -> None:
    """The HTTP statistics body is exactly the gRPC ModelStatisticsResponse in JSON."""
    ledger = Ledger()
    ledger.record_success(times(50))
    ledger.record_execution(1, 1, 2, 3)
    message = json_format.ParseDict(
        {"model_stats": [ledger.stats_json("simple", "1")]}, service_pb2.ModelStatisticsResponse()
    )
    assert message.model_stats[0].inference_stats.success.count == 1
    assert message.model_stats[0].batch_stats[0].compute_output.ns == 3


def test_summary_window_quantiles_cover_the_last_60_seconds_only() -> None:
    """Old observations leave the quantiles but stay in _count and _sum."""
    window = SummaryWindow()
    for value in range(1, 101):
        window.observe(now=0.0, value=value)
    assert dict(window.quantiles(now=1.0)) == {0.5: 50, 0.9: 90, 0.95: 95, 0.99: 99, 0.999: 100}
    window.observe(now=61.0, value=7)
    assert dict(window.quantiles(now=61.0))[0.5] == 7
    assert (window.count, window.total) == (101, 5050 + 7)


def test_idle_summary_reports_nan() -> None:
    """Breaks if an idle summary (never observed, or everything aged out) drops one of
    Triton's five quantiles or prints a number for it instead of NaN (``Nan``)."""
    aged_out = SummaryWindow()
    aged_out.observe(now=0.0, value=42)
    for window, now in ((SummaryWindow(), 0.0), (aged_out, 61.0)):
        quantiles = window.quantiles(now=now)
        assert [q for q, _ in quantiles] == [0.5, 0.9, 0.95, 0.99, 0.999]
        assert [math.isnan(value) for _, value in quantiles] == [True] * 5
    assert (aged_out.count, aged_out.total) == (1, 42)  # _count and _sum keep it


def test_faults_expire_and_apply_per_model() -> None:
    """A fault limited to one model and to a duration lapses on time, on the fake clock."""
    book = FaultBook(np.random.default_rng(0))
    book.add(LatencySpike(factor=4, model="simple", duration_s=10), now=0.0)
    book.add(SlowMetrics(delay_s=2), now=0.0)
    assert book.latency_factor("simple", now=5.0) == 4
    assert book.latency_factor("resnet50", now=5.0) == 1
    assert book.latency_factor("simple", now=10.5) == 1
    assert book.metrics_delay(now=10.5) == 2
    book.add(MalformedMetrics(), now=11.0)
    assert book.metrics_malformed(now=11.0)
    book.clear()
    assert not book.metrics_malformed(now=11.0)
    assert book.metrics_delay(now=11.0) == 0


def test_error_burst_fraction_is_seeded() -> None:
    """The same seed draws the same failures; the fraction holds roughly."""

    def pattern(seed: int) -> list[str | None]:
        book = FaultBook(np.random.default_rng(seed))
        book.add(ErrorBurst(reason="OTHER", fraction=0.3), now=0.0)
        return [book.failure_reason("simple", now=0.0) for _ in range(400)]

    first = pattern(7)
    assert first == pattern(7)
    assert first != pattern(8)
    assert sum(reason == "OTHER" for reason in first) / 400 == pytest.approx(0.3, abs=0.07)
