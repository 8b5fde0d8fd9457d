"""The sweep report says what the client adds (table, JSON, plot) and keeps perf_analyzer's CSV."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from sweep_support import judged
from tritonwatch.export.sweep_report import (
    client_network_seconds,
    client_network_share,
    render_svg,
    to_csv,
    to_json,
    to_text,
)
from tritonwatch.records.sweep_records import ServerBreakdown, StepResult, SweepSettings

pytestmark = pytest.mark.real

STAGES = {"queue": 0.000304, "compute_input": 0.000045, "compute_infer": 0.002877,
          "compute_output": 0.000362}  # fmt: skip
"""perf_analyzer's server averages for the batching model at concurrency 1 (real Triton)."""


def _step(level: float, avg: float, server: ServerBreakdown | None, ips: float) -> StepResult:
    latency = {"p50": 0.003716999, "p90": 0.004789, "p95": 0.0057899, "p99": 0.00859,
               "avg": avg}  # fmt: skip
    return StepResult(
        level=level, requests_per_second=ips, inferences_per_second=ips, latency=latency,
        requests=900, errors=0, error_rate=0.0, stable=True, windows=3, processes=1,
        client_cpu_per_request=0.0001, client_latency_share=0.02, generator_utilisation=0.2,
        generator_bound=False, server=server,
    )  # fmt: skip


def _sweep() -> tuple[StepResult, StepResult]:
    measured = _step(1, 0.004063, ServerBreakdown(900, 0.003593, STAGES, 1.0), 245.37169)
    blind = _step(2, 0.006262, None, 318.69)  # a server without the statistics API
    return measured, blind


def test_json_carries_what_the_client_adds_per_step() -> None:
    """Breaks if the JSON loses client_network_seconds (client mean minus Triton's mean
    request time over the step) or its share, or invents them without server statistics."""
    measured, blind = _sweep()
    settings = SweepSettings(url="grpc://127.0.0.1:1", model="batching", levels=(1, 2))
    data = json.loads(json.dumps(to_json(judged(settings, [measured, blind], False, []))))
    first, second = data["steps"]
    assert first["client_network_seconds"] == pytest.approx(0.004063 - 0.003593)
    assert first["client_network_share"] == pytest.approx((0.004063 - 0.003593) / 0.004063)
    assert first["client_network_seconds"] == pytest.approx(
        first["latency"]["avg"] - first["server"]["request_seconds"]
    )
    assert second["client_network_seconds"] is None and second["client_network_share"] is None
    assert client_network_seconds(blind) is None and client_network_share(blind) is None


def test_table_and_plot_show_the_same_client_share() -> None:
    """Breaks if the terminal table's client+net ms or the plot's tooltip disagree with
    the JSON's client_network_seconds."""
    measured, blind = _sweep()
    settings = SweepSettings(url="grpc://127.0.0.1:1", model="batching", levels=(1, 2))
    result = judged(settings, [measured, blind], False, [])
    lines = to_text(result, width=200)
    header = next(line for line in lines if "client+net ms" in line)
    column = re.split(r" {2,}", header.strip()).index("client+net ms")
    rows = [line.split() for line in lines if line.lstrip()[:1] in ("1", "2")]
    assert [row[column] for row in rows] == ["0.47", "-"]
    svg = render_svg(result)
    assert svg.count('<circle class="step"') == 2
    assert "= server 3.59 ms + client+net 0.47 ms (12%)</title>" in svg


def test_csv_is_filled_the_way_perf_analyzer_fills_it() -> None:
    """Breaks if the CSV drifts from perf_analyzer's report writer: microseconds truncated
    (not rounded), Network+Server Send/Recv = client mean - queue - compute clamped at 0
    (so it holds Triton's overhead outside its timers), six significant digits of
    inferences/s, Client Send/Recv 0 (we do not (un)marshal on the hot path)."""
    measured, blind = _sweep()
    settings = SweepSettings(url="grpc://127.0.0.1:1", model="batching", levels=(1, 2))
    faster = _step(4, 0.003, ServerBreakdown(900, 0.0036, STAGES, 1.0), 400.0)  # mean < stages
    rows = list(csv.DictReader(io.StringIO(to_csv(judged(settings, [blind, faster, measured],
                                                          False, [])))))  # fmt: skip
    assert [row["Concurrency"] for row in rows] == ["1", "2", "4"]  # by increasing infer/s
    first = rows[0]
    assert first["Inferences/Second"] == "245.372"
    assert (first["Client Send"], first["Client Recv"]) == ("0", "0")
    assert first["Network+Server Send/Recv"] == str(4063 - 304 - 45 - 2877 - 362)
    assert [first[f"Server {s}"] for s in ("Queue", "Compute Input", "Compute Infer",
                                            "Compute Output")] == ["304", "45", "2877", "362"]  # fmt: skip
    assert [first[f"p{p} latency"] for p in (50, 90, 95, 99)] == ["3716", "4789", "5789", "8590"]
    assert rows[1]["Network+Server Send/Recv"] == "6262"  # no server stats: all of it
    assert rows[1]["Server Queue"] == "0"
    assert rows[2]["Network+Server Send/Recv"] == "0"  # clamped, as perf_analyzer does
