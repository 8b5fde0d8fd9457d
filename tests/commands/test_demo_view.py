"""The demo's live table renders every model with its numbers and its state."""

from __future__ import annotations

import re

from rich.console import Console

from tritonwatch.commands.demo_view import ERROR_CHARACTERS, demo_screen, status_lines
from tritonwatch.export.status_page import (
    AdviceLine,
    ClientShare,
    ModelStatus,
    SloLine,
    StatusSnapshot,
    StreamStatus,
)
from tritonwatch.state.canary_board import LastError


def test_table_shows_state_breakdown_slo_and_advice() -> None:
    """Breaks if a demo row loses its p95, state, counts, breakdown, SLO burn or advice."""
    snapshot = StatusSnapshot([
        ModelStatus("demo", "simple", "http", True, 0.05, {"p50": 0.002, "p95": 0.003, "p99": 0.004},
                    {"success": 120}),
        ModelStatus("demo", "resnet50", "grpc", True, 0.05, {"p50": 0.08, "p95": 0.09, "p99": 0.1},
                    {"success": 40, "timeout": 2}, breakdown={"queue": 0.08, "compute_infer": 0.005},
                    bottleneck="queue-bound", slos=[SloLine("latency", 0.95, {"5m": 19.0}, 0.2)],
                    recommendations=[AdviceLine("lower", "max_queue_delay_microseconds", "80000", "40000", "queue")]),
    ])  # fmt: skip
    console = Console(record=True, width=400)
    console.print(demo_screen(snapshot, "http://127.0.0.1:9849"))
    text = console.export_text()
    simple = next(line for line in text.splitlines() if "demo/simple" in line)
    resnet = next(line for line in text.splitlines() if "demo/resnet50" in line)
    assert "3.0" in simple and "ok" in simple and "120" in simple
    assert "90.0" in resnet and "BREACH" in resnet and "42" in resnet
    assert "queue=80.0" in resnet
    assert "infer=5.0 [queue-bound]" in resnet
    assert "latency 19.0×" in resnet
    assert "lower max_queue_delay_microseconds 80000→40000" in resnet
    assert "http://127.0.0.1:9849/metrics" in text


def test_table_shows_the_canarys_last_error_with_its_reason() -> None:
    """Breaks if the live view hides why a model's canary fails (or takes the error's
    brackets for rich markup and drops them)."""
    failing = LastError("http_error", "[500] negative input: failure asked for", 10.0,
                        1_700_000_000.0, age_seconds=4.2)  # fmt: skip
    snapshot = StatusSnapshot([
        ModelStatus("real", "flaky", "http", True, 0.05, {}, {"http_error": 7},
                    last_error=failing),
        ModelStatus("real", "batching", "http", True, 0.05, {"p95": 0.003}, {"success": 9}),
    ])  # fmt: skip
    console = Console(record=True, width=400)
    console.print(demo_screen(snapshot, "http://127.0.0.1:9849"))
    text = console.export_text()
    flaky = next(line for line in text.splitlines() if "real/flaky" in line)
    batching = next(line for line in text.splitlines() if "real/batching" in line)
    assert "last error" in text
    assert "http_error 4 s ago: [500] negative input: failure asked for" in flaky
    assert batching.rstrip().endswith("–")  # no error: a dash


def test_a_long_last_error_is_cut_not_wrapped_over_the_table() -> None:
    """Breaks if one long server message takes over the live view."""
    long = LastError("bad_response", "x" * 1000, 0.0, 0.0, age_seconds=200.0)
    snapshot = StatusSnapshot([ModelStatus("t", "m", "http", True, 0.05, {}, {}, last_error=long)])
    console = Console(record=True, width=400)
    console.print(demo_screen(snapshot, "http://127.0.0.1:9849"))
    row = next(line for line in console.export_text().splitlines() if line.startswith("t/m "))
    prefix = "bad_response 3 min ago: "
    assert row.endswith(f"{prefix}{'x' * (ERROR_CHARACTERS - 1 - len(prefix))}…")


def test_table_shows_what_the_client_and_network_add() -> None:
    """Breaks if the live view loses the client+net column (end to end minus Triton's
    mean, and its share), invents one before Triton's statistics, or still repeats it
    as a breakdown stage."""
    share = ClientShare(server_seconds=0.0036, queue_seconds=0.0003, compute_seconds=0.00325,
                        server_other_seconds=0.00005, end_to_end_seconds=0.0054)  # fmt: skip
    snapshot = StatusSnapshot([
        ModelStatus("real", "batching", "grpc", True, 0.01, {"p95": 0.006}, {"success": 90},
                    breakdown={"queue": 0.0003, "compute_infer": 0.0029, "network_client": 0.0018},
                    client_share=share),
        ModelStatus("real", "fresh", "grpc", True, 0.01, {"p95": 0.006}, {"success": 3}),
    ])  # fmt: skip
    lines = status_lines(snapshot, width=400)
    column = re.split(r" {2,}", lines[1]).index("client+net ms")
    rows = {line.split()[0]: re.split(r" {2,}", line.strip()) for line in lines[2:]}
    assert rows["real/batching"][column] == "1.8 33%"  # 5.4 - 3.6 ms: a third
    assert rows["real/fresh"][column] == "–"
    assert "net=" not in "\n".join(lines)


def test_a_narrow_terminal_gets_the_text_under_each_row_and_every_number_whole() -> None:
    """Breaks if the live view at 80 columns cuts a number, overflows the terminal or
    loses a model's breakdown, burn rates, advice or last error."""
    failing = LastError("timeout", "deadline exceeded after 10 s", 10.0, 0.0, age_seconds=3.0)
    snapshot = StatusSnapshot([
        ModelStatus("demo", "resnet50", "grpc", True, 0.05, {"p50": 0.08, "p95": 0.09, "p99": 0.1},
                    {"success": 40, "timeout": 2}, breakdown={"queue": 0.08, "compute_infer": 0.005},
                    bottleneck="queue-bound", slos=[SloLine("latency", 0.95, {"5m": 19.0}, 0.2)],
                    recommendations=[AdviceLine("lower", "max_queue_delay_microseconds", "80000",
                                                "40000", "queue")], last_error=failing),
    ])  # fmt: skip
    lines = status_lines(snapshot, width=80)
    assert all(len(line) <= 80 for line in lines) and "…" not in "".join(lines)
    assert lines[2].split()[:2] == ["demo/resnet50", "grpc"]
    assert {"90.0", "50.0", "BREACH", "42"} <= set(lines[2].split())
    text = " ".join(" ".join(lines[3:]).split())
    assert "breakdown ms: queue=80.0 infer=5.0 [queue-bound]" in text
    assert "SLO burn: latency 19.0×" in text
    assert "recommendation: lower max_queue_delay_microseconds 80000→40000" in text
    assert "last error: timeout 3 s ago: deadline exceeded after 10 s" in text


def _streaming_snapshot() -> StatusSnapshot:
    stream = StreamStatus({"ttft": {"p50": 0.05, "p95": 0.0952}, "itl": {"p95": 0.00813}}, 8.0, 160)
    return StatusSnapshot([
        ModelStatus("demo", "llm", "http", True, 1.0, {"p50": 0.2, "p95": 0.3, "p99": 0.4},
                    {"success": 20}, stream=stream),
        ModelStatus("demo", "simple", "http", True, 0.05, {"p95": 0.003}, {"success": 120}),
    ])  # fmt: skip


def test_a_streaming_row_shows_its_ttft_and_itl_p95_and_others_a_dash() -> None:
    """Breaks if the live view loses a streaming model's TTFT/ITL p95 (ms, ITL to two
    decimals as on the status page) or gives a plain model anything but a dash there."""
    lines = status_lines(_streaming_snapshot(), width=400)
    column = re.split(r" {2,}", lines[1]).index("TTFT/ITL p95 ms")
    rows = {line.split()[0]: re.split(r" {2,}", line.strip()) for line in lines[2:]}
    assert rows["demo/llm"][column] == "95.2/8.13"
    assert rows["demo/simple"][column] == "–"


def test_at_80_columns_the_streaming_column_stays_whole() -> None:
    """Breaks if at 80 columns the TTFT/ITL p95 is cut, dropped or overflows the line."""
    lines = status_lines(_streaming_snapshot(), width=80)
    assert all(len(line) <= 80 for line in lines) and "…" not in "".join(lines)
    assert "TTFT/ITL p95 ms" in lines[1]
    assert "95.2/8.13" in lines[2].split() and "300.0" in lines[2].split()


def test_without_a_streaming_model_the_view_has_no_ttft_column() -> None:
    """Breaks if a fleet with no streaming model loses room to an empty TTFT/ITL column."""
    plain = StatusSnapshot([ModelStatus("demo", "simple", "http", True, 0.05, {"p95": 0.003},
                                        {"success": 120})])  # fmt: skip
    assert "TTFT" not in "\n".join(status_lines(plain, width=400))


def test_a_pipeline_row_shows_its_steps_and_the_slow_one() -> None:
    """The demo's pipeline reads as its steps (core's queue named), not as its own
    stages, where the steps' queue would be anonymous ``other`` time."""
    pipeline = ModelStatus(
        "demo", "pipeline", "http", True, 0.05, {"p95": 0.031}, {"success": 50},
        breakdown={"queue": 0.0, "compute_infer": 0.0099, "server_other": 0.0201},
        bottleneck="queue-bound",
        steps="prep 3.4 ms · core 25.4 ms (queue 20.1) · post 1.5 ms",
    )  # fmt: skip
    plain = ModelStatus("demo", "simple", "http", True, 0.05, {"p95": 0.003}, {"success": 9},
                        breakdown={"queue": 0.001})  # fmt: skip
    lines = status_lines(StatusSnapshot([pipeline, plain]), width=400)
    row = next(line for line in lines if "demo/pipeline" in line)
    assert "core 25.4 ms (queue 20.1)" in row and "[queue-bound]" in row
    assert "other=20.1" not in row
    assert "queue=1.0" in next(line for line in lines if "demo/simple" in line)
