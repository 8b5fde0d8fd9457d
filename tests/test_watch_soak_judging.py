"""The watcher soak's verdict (benchmarks/watch_soak.py): which canary failures its log
lines explain. Synthetic inputs; the soak itself is ``make soak``."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import watch_soak

KEY = "triton-http/batching/http"


def test_refused_connections_are_explained_by_the_targets_readiness_line() -> None:
    """Breaks if an outage's refused connections count as unexplained while the readiness
    probe said the target was not ready."""
    outcomes = {KEY: Counter(success=100, connection_error=5)}
    assert watch_soak.judge_failures(outcomes, Counter(), {"triton-http"}) == []


def test_refused_connections_without_a_readiness_line_are_unexplained() -> None:
    """Breaks if connection errors pass without any line saying the target was down."""
    outcomes = {KEY: Counter(success=100, connection_error=5)}
    (why,) = watch_soak.judge_failures(outcomes, Counter({KEY: 5}), set())
    assert "no target_not_ready line" in why


def test_other_failures_need_the_failure_logs_lines_and_counts() -> None:
    """Breaks if timeouts the failure log never mentioned pass as explained."""
    outcomes = {KEY: Counter(success=100, timeout=7)}
    assert watch_soak.judge_failures(outcomes, Counter({KEY: 7}), set()) == []
    (why,) = watch_soak.judge_failures(outcomes, Counter({KEY: 3}), set())
    assert why == f"{KEY}: 7 failures, the log accounts for 3"


def test_whole_lines_and_suppressed_counts_add_up_per_series() -> None:
    """Breaks if a suppressed line's count is read as one failure."""
    events = [
        {"event": "canary_request_failed", "target": "triton-http", "model": "batching",
         "protocol": "http"},
        {"event": "canary_failures_suppressed", "target": "triton-http", "model": "batching",
         "protocol": "http", "count": 40},
        {"event": "target_not_ready", "target": "mlserver"},
        {"event": "canary_started", "target": "x", "model": "y", "protocol": "http"},
    ]  # fmt: skip
    logged, not_ready = watch_soak.explained_by_logs(events)
    assert logged == Counter({KEY: 41})
    assert not_ready == {"mlserver"}


def test_a_soak_passes_only_without_pages_unexplained_failures_or_unrecovered_series() -> None:
    """Breaks if a page, an unexplained failure or a series that never recovered passes."""
    result = watch_soak.SoakResult(
        60.0, restarted_at=30.0, successes={KEY: 100.0, "mlserver/echo/http": 9.0}
    )
    assert not result.passed  # never recovered after the restart
    result.recovered_after[KEY] = 3.0
    assert result.passed
    result.pages.append({"labels": {"alertname": "TritonSLOBurn"}})
    assert not result.passed
