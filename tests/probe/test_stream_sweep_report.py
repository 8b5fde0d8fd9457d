"""A streaming sweep's table, CSV, JSON, plot and verdict lines carry TTFT, ITL and
output tokens/s, and say what the sweep was judged on."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from sweep_support import judged, stream_step
from tritonwatch.commands.sweep_cli import verdict_lines
from tritonwatch.config.canary_schema import StreamConfig
from tritonwatch.export.sweep_report import STREAM_CSV_COLUMNS, render_svg, to_csv, to_json, to_text
from tritonwatch.records.sweep_records import SweepResult, SweepSettings

pytestmark = pytest.mark.real


def _result() -> SweepResult:
    """Levels 1, 2, 4: tokens/s flattens at 2, ITL p95 passes the 10 ms budget at 4."""
    settings = SweepSettings(url="grpc://127.0.0.1:1", model="llm", levels=(1, 2, 4),
                             protocol="grpc", measure="itl", budget_p95=0.010,
                             stream=StreamConfig(max_tokens=8))  # fmt: skip
    steps = [
        stream_step(1, tokens_per_second=80.0, requests_per_second=10.0, ttft_p95=0.020,
                    itl_p95=0.004),
        stream_step(2, tokens_per_second=160.0, requests_per_second=20.0, ttft_p95=0.040,
                    itl_p95=0.006),
        stream_step(4, tokens_per_second=162.0, requests_per_second=20.25, ttft_p95=0.090,
                    itl_p95=0.012),
    ]  # fmt: skip
    return judged(settings, steps)


def test_json_has_per_level_ttft_itl_and_tokens_per_second() -> None:
    """Breaks if the JSON drops a step's TTFT, ITL, TPOT or tokens/s, the stream settings
    or the sentence saying what the knee and budget were judged on."""
    data = json.loads(json.dumps(to_json(_result())))
    assert data["settings"]["measure"] == "itl"
    assert data["settings"]["stream"]["max_tokens"] == 8
    assert data["judged_on"] == "judged on output tokens/s and ITL p95"
    assert [s["output_tokens_per_second"] for s in data["steps"]] == [80.0, 160.0, 162.0]
    assert [s["ttft"]["p95"] for s in data["steps"]] == [0.020, 0.040, 0.090]
    assert [s["itl"]["p95"] for s in data["steps"]] == [0.004, 0.006, 0.012]
    assert data["steps"][0]["itl_per_request"]["p50"] == 0.002
    assert data["knee"] == {"concurrency": 2, "throughput": 160.0, "reached": True}
    assert data["operating_point"] == 2


def test_csv_has_the_streaming_columns_in_microseconds() -> None:
    """Breaks if the streaming CSV's columns or units drift (perf_analyzer's columns are
    for unary requests and would hold whole-stream latencies)."""
    rows = list(csv.reader(io.StringIO(to_csv(_result()))))
    assert tuple(rows[0]) == STREAM_CSV_COLUMNS
    first = dict(zip(rows[0], rows[1], strict=True))
    assert (first["Concurrency"], first["Output Tokens/Second"], first["Requests/Second"]) == (
        "1", "80", "10",
    )  # fmt: skip
    assert (first["TTFT p95"], first["ITL p95"], first["TPOT p50"]) == ("20000", "4000", "2000")
    assert [row[0] for row in rows[1:]] == ["1", "2", "4"]


def test_table_and_verdict_lines_say_tokens_per_second_and_the_measure() -> None:
    """Breaks if the table shows infer/s and whole latency for a streaming sweep or the
    verdict lines hide the unit and measure they were judged on."""
    lines = to_text(_result(), width=160)
    assert "judged on output tokens/s and ITL p95" in lines[0]
    header = lines[1]
    for column in ("tok/s", "TTFT p50 ms", "TTFT p95 ms", "ITL p50 ms", "ITL p95 ms"):
        assert column in header
    index = next(i for i, line in enumerate(lines) if line.lstrip().startswith("2 "))
    assert re.search(r"\b160\.0\b.*\b40\.00\b.*\b6\.00\b", lines[index]), lines[index]
    assert "knee, operating point" in lines[index] + lines[index + 1]
    assert all(len(line) <= 80 for line in to_text(_result(), width=80))
    assert verdict_lines(_result()) == [
        "knee: 2; judged on output tokens/s and ITL p95",
        "operating point: 2 (160.0 output tokens/s, ITL p95 6.00 ms)",
    ]


def test_plot_draws_ttft_and_itl_against_concurrency() -> None:
    """Breaks if the plot loses the TTFT or ITL line, draws the budget as a latency p95,
    or places the knee on requests/s instead of tokens/s."""
    svg = render_svg(_result())
    assert 'class="latency itl"' in svg and 'class="latency ttft"' in svg
    assert "budget ITL p95 10 ms" in svg
    assert "output tokens/s (max 162)" in svg
    assert "TTFT p95 40.00 ms, ITL p95 6.00 ms" in svg  # the tooltip of level 2
    assert svg.count('class="step"') == 3
