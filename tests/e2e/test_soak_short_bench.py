"""Soak, short form: benchmarks/soak.py's run for 45 s instead of 30 min.

A measurement (memory, threads and files over wall time), so ``bench``: long enough to
catch a leak per request or per job run (20 models at 2/s and every job on 1–2 s make
tens of thousands of operations in 30 s). The analysis it relies on is checked on
synthetic series in test_soak_short.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import soak

pytestmark = pytest.mark.bench


def test_twenty_models_for_45_seconds_grow_neither_memory_threads_nor_files() -> None:
    """Twenty models at 2/s for 45 s leak no memory, threads or files and miss no scrape."""
    result = soak.run_soak(45.0, warm_up=15.0, sample_interval=1.0)
    growth = result.growth
    report = soak.report(growth)
    assert result.daemon_exit is None  # still up at the end
    assert result.scrapes_failed == 0, report
    assert result.scrapes_ok >= 15  # /metrics answered every 2 s throughout
    assert result.canary.get("success", 0) > 1000  # 20 models × 2/s really ran
    assert growth.after >= 25
    assert growth.thread_growth <= 2, report
    assert growth.fd_growth <= 2, report
    assert growth.rss_growth_mb <= 5.0, report
    assert growth.passed
