"""``tritonwatch sweep --csv`` reads as perf_analyzer's ``-f`` CSV: the same header, column
for column, and latencies in the same unit (microseconds).

The header is the real perf_analyzer's own, as tests/fixtures/perf_analyzer_csv_header.json
holds it (test_perf_analyzer_csv_header_real.py checks that capture against the binary);
the unit follows from the batching model's service time. How close our numbers come to
perf_analyzer's on the same levels is a benchmark: test_sweep_vs_perf_analyzer_bench.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from perf_analyzer_support import numbers, proxy_free_environment, read_csv
from real_triton import RealTriton
from support import TRITONWATCH, fixtures_dir

pytestmark = pytest.mark.real

SERVICE_US = 2000
"""The batching model sleeps at least 2 ms per execution: no latency can be below."""
UNIT_SLIP_US = 1_000_000
"""A latency in nanoseconds would read 1000 times too large: over this (1 s, hundreds of
times what the model takes even on a loaded host). In milliseconds it would be under
:data:`SERVICE_US`."""
MODES = {
    # tritonwatch flag, its levels; the CSV's first column
    "concurrency": ("--concurrency", "1,2", "Concurrency"),
    "rate": ("--request-rate", "50,100", "Request Rate"),
}
LATENCIES = ("p50 latency", "p90 latency", "p95 latency", "p99 latency", "Server Compute Infer")


@pytest.mark.parametrize("mode", sorted(MODES))
def test_sweep_csv_has_perf_analyzers_header_and_units(
    real_triton: RealTriton, mode: str, tmp_path: Path
) -> None:
    """Breaks if our CSV's columns (names, order, first column) drift from the real
    perf_analyzer's header, a level asked for is missing, or a latency is written in
    another unit than microseconds."""
    flag, levels, first = MODES[mode]
    out = tmp_path / "tritonwatch.csv"
    command = [
        TRITONWATCH, "sweep", "--url", real_triton.http_url, "--model", "batching",
        flag, levels, "--measurement-request-count", "20", "--max-windows", "3",
        "--csv", str(out),
    ]  # fmt: skip
    run = subprocess.run(
        command, capture_output=True, text=True, timeout=180, env=proxy_free_environment()
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]

    header, rows = read_csv(out)
    captured = json.loads((fixtures_dir() / "perf_analyzer_csv_header.json").read_text())
    assert ",".join(header) == captured["headers"][mode]
    assert header[0] == first
    assert sorted(int(float(row[first])) for row in rows) == [int(v) for v in levels.split(",")]
    for row in rows:
        for column, value in zip(LATENCIES, numbers(row, LATENCIES), strict=True):
            assert SERVICE_US <= value < UNIT_SLIP_US, (column, row)
        assert numbers(row, ["Inferences/Second"])[0] > 0, row
