"""How the capacity benchmark (benchmarks/capacity_accuracy.py) reads perf_analyzer and
the daemon: the best in-budget row of a ``-f`` CSV, the ``-v`` windows of the rate that
ended a range, and the sweep's steps from /metrics. No benchmark runs here."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

from support import fixtures_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from capacity_accuracy import (
    Point,
    best_in_budget,
    csv_points,
    left_out,
    rate_windows,
    sweep_steps,
)

HEADERS = json.loads((fixtures_dir() / "perf_analyzer_csv_header.json").read_text())["headers"]
"""The real perf_analyzer's CSV header lines, per mode."""


def _csv(mode: str, rows: list[tuple[float, float, int]]) -> list[dict[str, str]]:
    """A CSV under the real header: (level, inferences/s, p95 µs) per row, the other
    columns filled."""
    header = HEADERS[mode].split(",")
    lines = [HEADERS[mode]]
    for level, throughput, p95 in rows:
        values = dict.fromkeys(header, "7")
        values |= {
            header[0]: f"{level:g}",
            "Inferences/Second": f"{throughput:g}",
            "p95 latency": str(p95),
            "p99 latency": str(p95 * 2),
        }
        lines.append(",".join(values[name] for name in header))
    return list(csv.DictReader(io.StringIO("\n".join(lines) + "\n")))


def test_the_best_row_is_the_highest_throughput_whose_p95_is_in_the_budget() -> None:
    """Breaks if a row over the budget is chosen, the last row is taken instead of the
    busiest, the budget's edge is not inside, or µs are not read as µs."""
    rows = _csv(
        "concurrency",
        [(1, 47.9, 21_400), (2, 49.6, 100_000), (3, 49.4, 61_000), (4, 51.0, 100_001)],
    )
    points = csv_points(rows, "Concurrency")
    assert points[0] == Point(1.0, 47.9, 0.0214)
    assert best_in_budget(points, 0.1) == Point(2.0, 49.6, 0.1)
    assert best_in_budget(points, 0.05) == Point(1.0, 47.9, 0.0214)
    assert best_in_budget(points, 0.02) is None
    assert best_in_budget([], 0.1) is None


def test_a_rate_csv_reads_its_request_rate_column() -> None:
    """Breaks if the open loop's rows are not keyed by their request rate."""
    rows = _csv("rate", [(37.2, 37.1, 24_000), (39.68, 39.5, 31_000)])
    assert [p.level for p in csv_points(rows, "Request Rate")] == [37.2, 39.68]


VERBOSE = """\
*** Measurement Settings ***
  Latency limit: 100 msec
  Stabilizing using p95 latency

Request Rate: 44.64 inference requests per seconds
  Pass [1] throughput: 44.5 infer/sec. p95 latency: 41200 usec
  Pass [2] throughput: 44.6 infer/sec. p95 latency: 38800 usec
  Pass [3] throughput: 44.6 infer/sec. p95 latency: 40100 usec
  Client:
    Request count: 321
    p95 latency: 40100 usec
Request Rate: 47.12 inference requests per seconds
  Pass [1] throughput: 47.0 infer/sec. p95 latency: 62000 usec
  Pass [2] throughput: 46.9 infer/sec. p95 latency: 131000 usec
  Pass [3] throughput: 46.8 infer/sec. p95 latency: 207000 usec
Measured latency went over the set limit of 100 msec.
Inferences/Second vs. Client p95 Batch Latency
Request Rate: 44.64, throughput: 44.6 infer/sec, latency 40100 usec
"""


def test_the_windows_of_the_rate_that_ended_the_range_are_found() -> None:
    """Breaks if the -v windows are not split by rate, the summary's 'Request Rate: X,'
    line is read as a level, or the rate left out of the CSV is not the one returned."""
    windows = rate_windows(VERBOSE)
    assert sorted(windows) == [44.64, 47.12]
    assert [p.p95 for p in windows[47.12]] == [0.062, 0.131, 0.207]
    assert windows[44.64][0] == Point(44.64, 44.5, 0.0412)
    kept = [Point(44.64, 44.6, 0.0401)]
    assert [p.p95 for p in left_out(windows, kept)] == [0.062, 0.131, 0.207]
    assert left_out(windows, [*kept, Point(47.12, 46.9, 0.09)]) == []
    assert left_out({}, kept) == []


METRICS = """\
# HELP tritonwatch_sweep_throughput_inferences_per_second Throughput.
# TYPE tritonwatch_sweep_throughput_inferences_per_second gauge
tritonwatch_sweep_throughput_inferences_per_second{concurrency="1",model="saturating",target="cap"} 47.5
tritonwatch_sweep_throughput_inferences_per_second{concurrency="2",model="saturating",target="cap"} 49.1
tritonwatch_sweep_throughput_inferences_per_second{concurrency="1",model="other",target="cap"} 900.0
# HELP tritonwatch_sweep_latency_seconds Latency quantiles.
# TYPE tritonwatch_sweep_latency_seconds summary
tritonwatch_sweep_latency_seconds{concurrency="1",model="saturating",quantile="0.5",target="cap"} 0.020
tritonwatch_sweep_latency_seconds{concurrency="1",model="saturating",quantile="0.95",target="cap"} 0.021
tritonwatch_sweep_latency_seconds{concurrency="2",model="saturating",quantile="0.95",target="cap"} 0.041
tritonwatch_sweep_latency_seconds_count{concurrency="2",model="saturating",target="cap"} 300
"""


def test_the_sweep_steps_come_from_the_daemons_metrics_for_the_model_alone() -> None:
    """Breaks if another model's step, another quantile or the summary's count leaks in."""
    assert sweep_steps(METRICS, "saturating") == [
        Point(1.0, 47.5, 0.021),
        Point(2.0, 49.1, 0.041),
    ]
    assert sweep_steps(METRICS, "absent") == []
