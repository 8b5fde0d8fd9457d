"""The perf_analyzer CSV header that tests/fixtures/perf_analyzer_csv_header.json holds is
the one the real perf_analyzer (``.triton/bin/perf_analyzer``) writes today.

The sweep's unit test (tests/probe/test_sweep.py) compares our CSV header with that
capture, so it needs no server; this test captures the header again from the binary,
against the real tritonserver, so the fixture cannot drift from what it claims to be.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perf_analyzer_support import run_perf_analyzer
from real_triton import RealTriton
from support import fixtures_dir

pytestmark = pytest.mark.real

FIXTURE = fixtures_dir() / "perf_analyzer_csv_header.json"
RANGES = {
    # perf_analyzer's flag and one level: the header does not depend on the levels
    "concurrency": ("--concurrency-range", "1:1"),
    "rate": ("--request-rate-range", "50:50"),
}


@pytest.mark.parametrize("mode", sorted(RANGES))
def test_the_captured_header_is_what_perf_analyzer_writes(
    real_triton: RealTriton, mode: str, tmp_path: Path
) -> None:
    """Breaks if the checked-in header differs from the first line of the real
    perf_analyzer's ``-f`` CSV in this mode (re-capture it: the message shows the line)."""
    out = tmp_path / "perf_analyzer.csv"
    run = run_perf_analyzer(
        "batching", f"127.0.0.1:{real_triton.http_port}", "http", out, *RANGES[mode]
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    first_line = out.read_text().splitlines()[0]
    captured = json.loads(FIXTURE.read_text())["headers"]
    assert captured.keys() == RANGES.keys()
    assert captured[mode] == first_line
