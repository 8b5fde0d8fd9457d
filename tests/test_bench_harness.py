"""The arithmetic of ``make bench`` (benchmarks/harness.py): medians, paired ratios,
goals, formatting, and reading /proc. No benchmark runs here, and nothing is timed."""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import harness
from harness import (
    Goal,
    ProcSample,
    Row,
    Table,
    cpu_model,
    cpu_ticks,
    footprint,
    format_ratio,
    format_value,
    median,
    read_proc,
    render_report,
    render_table,
    rss_bytes,
    table_from_json,
    table_to_json,
)


def test_median_ignores_nan_and_is_none_when_empty() -> None:
    """Breaks if a NaN repeat moves the median, or no figures give a number instead of None."""
    assert median([3.0, float("nan"), 1.0, 2.0]) == 2.0
    assert median([]) is None
    assert median([float("nan")]) is None


def test_paired_rows_take_the_median_of_per_repeat_ratios() -> None:
    """Breaks if paired rows take the ratio of medians instead of the median of ratios."""
    # Repeat by repeat: 0.5, 0.5, 2.0 -> median 0.5; ratio of medians would be 20/20 = 1.
    row = Row("x", ours=[10.0, 20.0, 80.0], anchor=[20.0, 40.0, 40.0])
    assert row.ratio == 0.5
    assert row.ours_median == 20.0


def test_unpaired_rows_take_the_ratio_of_medians_and_survive_missing_anchors() -> None:
    """Breaks if unpaired rows lose the ratio of medians, or a missing or zero anchor raises."""
    assert Row("x", ours=[10.0, 30.0], anchor=[40.0]).ratio == 0.5
    assert Row("x", ours=[10.0]).ratio is None
    assert Row("x", ours=[10.0], anchor=[0.0]).ratio is None


def test_goals_judge_the_ratio_or_our_figure() -> None:
    """Breaks if a goal judges the wrong figure, or a missing figure counts as met or missed."""
    at_least = Row("load", ours=[30.0], anchor=[100.0], goal=Goal(">=", 0.2))
    at_most = Row("parse", ours=[30.0], anchor=[100.0], goal=Goal("<=", 0.2))
    seconds = Row("detect", ours=[31.0], goal=Goal("<=", 60.0, on="ours", unit="s"))
    never = Row("detect", ours=[float("nan")], goal=Goal("<=", 60.0, on="ours"))
    assert (at_least.met, at_most.met, seconds.met) == (True, False, True)
    assert never.met is None  # no page at all is "no figure", shown as such
    assert Row("info", ours=[1.0], anchor=[2.0]).met is None
    assert seconds.goal is not None
    assert seconds.goal.text() == "ours ≤ 60 s"
    assert Goal(">=", 1 / 3).text() == "ratio ≥ 0.333"


def test_a_two_sided_goal_is_missed_on_either_side_and_kept_through_json() -> None:
    """Breaks if a goal with ``upper`` passes a figure above it or below its bound, reads
    as one-sided, loses ``upper`` in JSON, or a report written before ``upper`` existed
    no longer loads."""
    within = Goal(">=", 0.75, upper=1.25)
    rows = [Row("c", ours=[o], anchor=[100.0], goal=within) for o in (70.0, 100.0, 130.0)]
    assert [row.met for row in rows] == [False, True, False]
    assert within.text() == "0.75 ≤ ratio ≤ 1.25"
    headroom = Goal(">=", 0.3, on="ours", upper=0.7)
    assert [headroom.met(h, None) for h in (0.29, 0.5, 0.71)] == [False, True, False]
    table = Table("capacity", "9. Capacity", "ours", "perf_analyzer", rows=rows)
    assert table_from_json(table_to_json(table)).rows[0].goal == within
    old = table_to_json(Table("x", "x", "a", "b", rows=[Row("y", [1.0], goal=Goal("<=", 2.0))]))
    assert table_from_json(old.replace(', "upper": null', "")).rows[0].goal == Goal("<=", 2.0)


def test_values_read_as_median_with_the_range_of_repeats() -> None:
    """Breaks if values stop reading as a median with the repeats' range, or ratios lose digits."""
    assert format_value([12468.0], "req/s") == "12 468 req/s"
    assert format_value([3.0, 1.0, 2.0], "ms") == "2 ms [1–3]"
    assert format_value([0.0123]) == "0.0123"
    assert format_value([]) == "—"
    assert format_ratio(0.7123) == "0.71"
    assert format_ratio(0.0421) == "0.042"
    assert format_ratio(None) == "—"


def test_a_missed_goal_is_marked_in_the_table_and_the_summary() -> None:
    """Breaks if a missed goal is not marked in its table row and named in the summary."""
    table = Table("parse", "2. Parsing", "ours", "prometheus_client")
    table.rows = [
        Row("page", ours=[70.0], anchor=[560.0], unit="ms", goal=Goal("<=", 0.2)),
        Row("slow page", ours=[300.0], anchor=[560.0], unit="ms", goal=Goal("<=", 0.2)),
    ]
    text = render_table(table)
    assert "| page | 70 ms | 560 ms | 0.12 | ratio ≤ 0.2 | met |" in text
    assert "| slow page | 300 ms | 560 ms | 0.54 | ratio ≤ 0.2 | **missed** |" in text
    report = render_report({"date": "today"}, [table])
    assert "| 2. Parsing | 1 of 2 | slow page |" in report
    assert "| date | today |" in report


def test_a_failed_benchmark_says_so() -> None:
    """Breaks if a benchmark that raised is not shown as failed, with its error, in the report."""
    table = Table("tuner", "6. Tuner", "—", "—", error="RuntimeError('boom')")
    assert "**failed**" in render_table(table)
    assert "failed: RuntimeError('boom')" in render_report({}, [table])


def test_proc_texts_are_read_whatever_the_command_name() -> None:
    """Breaks if /proc parsing misreads RSS, or a command name with spaces and parens shifts CPU."""
    status = "Name:\tpython\nVmPeak:\t  999 kB\nVmRSS:\t   2048 kB\nThreads:\t4\n"
    assert rss_bytes(status) == 2048 * 1024
    with pytest.raises(ValueError, match="VmRSS"):
        rss_bytes("Name:\tkthreadd\n")
    fields = " ".join(["S", *["0"] * 10, "150", "25", *["0"] * 30])
    assert cpu_ticks(f"4242 (tritonwatch (run) x) {fields}") == 175


def test_footprint_uses_cpu_between_first_and_last_sample() -> None:
    """Breaks if footprint CPU is not over first to last sample, or RSS median and max are wrong."""
    mib = 2**20
    samples = [
        ProcSample(at=100.0, rss=10 * mib, cpu_seconds=5.0),
        ProcSample(at=110.0, rss=30 * mib, cpu_seconds=5.5),
        ProcSample(at=120.0, rss=20 * mib, cpu_seconds=6.0),
    ]
    result = footprint(samples)
    assert result.cpu_percent == pytest.approx(5.0)  # 1 s of CPU over 20 s
    assert (result.rss_median, result.rss_max) == (20 * mib, 30 * mib)
    assert (result.samples, result.seconds) == (3, 20.0)
    with pytest.raises(ValueError, match="two samples"):
        footprint(samples[:1])


def _vm_rss() -> int:
    """This process's resident set, read straight off /proc/self/status (bytes)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line in /proc/self/status")


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def test_this_process_can_be_sampled() -> None:
    """Breaks if read_proc reports RSS in the wrong unit or field (VmPeak, VmHWM, pages, KiB)
    or CPU in ticks instead of seconds: it must agree with /proc/self/status and getrusage."""
    # 64 MiB written and freed (above glibc's largest mmap threshold, so handed back to
    # the kernel at once): the high-water mark VmHWM now stands far above VmRSS.
    ballast = b"x" * (64 << 20)
    del ballast
    rss_before, cpu_before, at_before = _vm_rss(), _cpu_seconds(), time.monotonic()
    sample = read_proc(os.getpid())
    rss_after, cpu_after, at_after = _vm_rss(), _cpu_seconds(), time.monotonic()
    slack = 512 * 1024  # what the interpreter may allocate between two reads
    assert min(rss_before, rss_after) - slack <= sample.rss <= max(rss_before, rss_after) + slack
    assert sample.rss <= resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 + slack
    # /proc/PID/stat counts whole clock ticks for user and system time apiece
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert cpu_before - 2 * tick - 0.05 <= sample.cpu_seconds <= cpu_after + 0.05
    assert at_before <= sample.at <= at_after


def test_cpu_model_from_cpuinfo() -> None:
    """Breaks if the CPU model is not read from x86's model name or ARM's Hardware line."""
    assert cpu_model("processor\t: 0\nmodel name\t: AMD EPYC 7B13\n") == "AMD EPYC 7B13"
    assert cpu_model("Hardware\t: BCM2835\n") == "BCM2835"


def test_a_table_survives_the_trip_between_processes() -> None:
    """Breaks if a table changes on its way through JSON: rows, goals, NaN, anchors, notes."""
    table = Table("detection", "5. Detection", "ours", "—", notes=["one run"], seconds=12.5)
    table.rows = [
        Row("0.95", ours=[float("nan")], unit="s", goal=Goal("<=", 60.0, on="ours", unit="s")),
        Row("0.999", ours=[0.8], anchor=[1.0, 2.0]),
    ]
    back = table_from_json(table_to_json(table))
    assert render_table(back) == render_table(table)
    assert back.rows[0].goal == table.rows[0].goal
    assert back.rows[1].anchor == [1.0, 2.0]


def test_a_partial_run_merges_into_the_kept_tables_in_the_harness_order() -> None:
    """Breaks if a partial run's merge loses kept tables, their dates, or the harness order."""
    kept = [
        Table("load", "1. Load", "a", "b", rows=[Row("x", [1.0])], measured="day 1"),
        Table("parse", "2. Parse", "a", "b", rows=[Row("y", [2.0])], measured="day 1"),
    ]
    fresh = [Table("parse", "2. Parse", "a", "b", rows=[Row("y", [3.0])], measured="day 2")]
    extra = [Table("new", "9. New", "a", "b")]
    restored = harness.tables_from_json(harness.tables_to_json(kept))
    result = harness.merged(restored, [*extra, *fresh], ["load", "parse"])
    assert [table.key for table in result] == ["load", "parse", "new"]
    assert result[1].rows[0].ours == [3.0] and result[1].measured == "day 2"
    assert result[0].rows[0].ours == [1.0] and result[0].measured == "day 1"
    assert "* measured day 2" in harness.render_table(result[1])


# --- the footprint's streaming variant (benchmarks/footprint.py --streams) -----------------


def test_the_streaming_footprint_adds_llm_models_beside_the_plain_twenty() -> None:
    """Breaks if ``--streams`` adds no decoupled LLM models, changes the 20 plain ones, or
    the daemon's config leaves the LLM models out (no streaming canary would run)."""
    import footprint

    from tritonwatch.config import parse_config

    plain = footprint.model_set()
    streaming = footprint.model_set(streams=footprint.STREAMS)
    assert streaming.models[: footprint.MODELS] == plain.models
    assert all(model.llm is None for model in plain.models)
    llms = streaming.models[footprint.MODELS :]
    assert [model.name for model in llms] == [f"llm_0{i}" for i in range(5)]
    assert {model.llm.backend for model in llms if model.llm is not None} == {"vllm"}
    assert {model.instance_group.gpus[0] for model in llms} == {0, 1, 2, 3}
    names = [model.name for model in streaming.models]
    text = footprint.daemon_config("http://127.0.0.1:1", "http://127.0.0.1:2/metrics", names)
    config = parse_config(text, "footprint.yaml")
    assert [model.name for model in config.targets[0].models] == names


def test_the_footprint_counts_streams_and_tokens_over_every_model() -> None:
    """Breaks if the footprint's stream figures miss a model or read another family."""
    import footprint

    page = """\
# TYPE tritonwatch_canary_time_to_first_token_seconds histogram
tritonwatch_canary_time_to_first_token_seconds_count{model="llm_00"} 30
tritonwatch_canary_time_to_first_token_seconds_sum{model="llm_00"} 0.9
tritonwatch_canary_time_to_first_token_seconds_count{model="llm_01"} 29
tritonwatch_canary_time_to_first_token_seconds_sum{model="llm_01"} 0.8
# TYPE tritonwatch_canary_output_tokens counter
tritonwatch_canary_output_tokens_total{model="llm_00"} 1920
tritonwatch_canary_output_tokens_total{model="llm_01"} 1856
# TYPE tritonwatch_canary_requests counter
tritonwatch_canary_requests_total{model="llm_00",outcome="success"} 31
"""
    assert footprint.stream_totals(page) == (59.0, 3776.0)
