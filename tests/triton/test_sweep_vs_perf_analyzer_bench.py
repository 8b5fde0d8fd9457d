"""``tritonwatch sweep --csv`` next to the real perf_analyzer's ``-f`` CSV, same model and
levels: the README promises that scripts and spreadsheets written for perf_analyzer's
CSV read ours, so the header must be the same, column for column, and the numbers must
be in the same unit (microseconds) and of the same size.

Of the same size is an accuracy against another tool, measured on a shared machine, so
this is a ``bench`` module (``pytest -m bench``). The suite keeps the header and the
unit, without perf_analyzer's run, in test_sweep_vs_perf_analyzer.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from perf_analyzer_support import numbers, proxy_free_environment, read_csv, run_perf_analyzer
from real_triton import RealTriton
from support import TRITONWATCH

pytestmark = pytest.mark.bench

SERVICE_US = 2000
"""The batching model sleeps at least 2 ms per execution: no latency can be below."""
FACTOR = 3.0
"""Two runs on a shared machine differ; a unit slip (ms, ns, s) is a factor of 1000."""
MODES = {
    # tritonwatch flag, its levels; perf_analyzer flag, the same levels; CSV first column
    "concurrency": ("--concurrency", "1,2", "--concurrency-range", "1:2", "Concurrency"),
    "rate": ("--request-rate", "50,100", "--request-rate-range", "50:100:50", "Request Rate"),
}


def _sweep(server: RealTriton, out: Path, flag: str, levels: str) -> None:
    command = [
        TRITONWATCH, "sweep", "--url", server.http_url, "--model", "batching",
        flag, levels, "--measurement-interval", "1s", "--max-windows", "4",
        "--csv", str(out),
    ]  # fmt: skip
    run = subprocess.run(
        command, capture_output=True, text=True, timeout=180, env=proxy_free_environment()
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]


def _within(ours: float, theirs: float) -> bool:
    return theirs / FACTOR <= ours <= theirs * FACTOR


@pytest.mark.parametrize("mode", sorted(MODES))
def test_sweep_csv_matches_perf_analyzers_header_units_and_sizes(
    real_triton: RealTriton, mode: str, tmp_path: Path
) -> None:
    """Breaks if our CSV's columns (names, order, first column) or units drift from the
    real perf_analyzer's on the same model and load levels."""
    our_flag, our_levels, their_flag, their_levels, first = MODES[mode]
    theirs_path, ours_path = tmp_path / "perf_analyzer.csv", tmp_path / "tritonwatch.csv"
    run = run_perf_analyzer(
        "batching",
        f"127.0.0.1:{real_triton.http_port}",
        "http",
        theirs_path,
        their_flag,
        their_levels,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    _sweep(real_triton, ours_path, our_flag, our_levels)

    their_header, their_rows = read_csv(theirs_path)
    our_header, our_rows = read_csv(ours_path)
    assert our_header == their_header
    assert our_header[0] == first
    by_level = {row[first]: row for row in their_rows}
    assert sorted(row[first] for row in our_rows) == sorted(by_level)
    for ours in our_rows:
        theirs = by_level[ours[first]]
        for column in ("p50 latency", "p95 latency", "Server Compute Infer"):
            (our_value, their_value) = numbers(ours, [column]) + numbers(theirs, [column])
            assert our_value >= SERVICE_US, (column, ours)
            assert their_value >= SERVICE_US, (column, theirs)
            assert _within(our_value, their_value), (column, our_value, their_value)
        throughput = numbers(ours, ["Inferences/Second"]) + numbers(theirs, ["Inferences/Second"])
        assert _within(*throughput), throughput
