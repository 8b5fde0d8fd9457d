"""`sweep`, `tune`, `rules` and the demo's live view fit 80 and 120 columns without
cutting a number, and show more columns on the wider terminal (issue 16)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from sim_process import SimProcess
from support import TRITONWATCH, fixtures_dir, wait_until
from tritonwatch.analysis.slo import slo_specs
from tritonwatch.commands.demo import (
    DEMO_CACHE_BYTES,
    DEMO_MODELS,
    DEMO_SCENARIOS,
    demo_config,
    demo_model_set,
)
from tritonwatch.commands.demo_view import demo_screen, status_lines
from tritonwatch.commands.tune.candidates import Change
from tritonwatch.commands.tune.cli import history_lines
from tritonwatch.commands.tune.tuner import TuneResult, TuneStep
from tritonwatch.common.terminal_table import Column, render_table
from tritonwatch.config import load_config
from tritonwatch.export.status_page import StatusSnapshot
from tritonwatch.runtime.daemon import Daemon
from tritonwatch.sim.server import Simulator

pytestmark = pytest.mark.real

WIDTHS = (80, 120)


def _tokens(text: str) -> set[str]:
    """Whole words of ``text``: a number cut to ``280…`` is not ``280.1``."""
    return set(re.split(r"[\s,;:()\[\]]+", text))


def _assert_fits(text: str, width: int) -> None:
    too_long = [line for line in text.splitlines() if len(line) > width]
    assert not too_long, f"lines over {width} columns: {too_long}"
    assert "…" not in text


def _header(text: str, first: str) -> list[str]:
    """The header line starting with ``first``, split into its column names."""
    line = next(
        line for line in text.splitlines() if re.match(f"{re.escape(first)}( {{2}}|$)", line)
    )
    return re.split(r" {2,}", line.strip())


def _run(*args: str, width: int, timeout: float = 120, cwd: Path | None = None) -> str:
    env = {**os.environ, "COLUMNS": str(width)}
    done = subprocess.run([TRITONWATCH, *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_table_too_wide_moves_notes_under_rows_and_drops_optional_columns() -> None:
    """Breaks if the layout cuts a cell, exceeds the width, or loses the note text."""
    columns = (Column("level"), Column("infer/s"), Column("p99 ms", 1), Column("extra ms", 2),
               Column("note", align="left", note=True))  # fmt: skip
    rows = [("1", "280.1", "12.34", "99999.99", "knee, operating point " * 3)]
    wide = render_table(columns, rows, width=200)
    narrow = render_table(columns, rows, width=30)
    assert len(wide) == 2 and wide[1].split()[:4] == ["1", "280.1", "12.34", "99999.99"]
    assert narrow[1].split() == ["1", "280.1", "12.34"]  # extra ms (priority 2) dropped
    assert all(len(line) <= 30 for line in narrow)
    assert " ".join(" ".join(narrow[2:]).split()) == "note: " + " ".join(rows[0][4].split())
    tiny = render_table(columns[:2], [("1", "280.1")], width=10)  # not even two columns
    assert tiny == ["level: 1", "  infer/s:", "    280.1"]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess() as process:
        yield process


def test_sweep_fits_the_terminal_and_prints_every_level_whole(
    sim: SimProcess, tmp_path: Path
) -> None:
    """Breaks if `tritonwatch sweep` cuts a number ("280…"), overflows 80 or 120 columns,
    or shows no more columns on the wider terminal."""
    headers = {}
    for width in WIDTHS:
        out = tmp_path / f"sweep{width}.json"
        text = _run("sweep", "--url", sim.http_url, "--model", "simple", "--concurrency", "1,4",
                    "--measurement-interval", "300ms", "--budget-p95", "50ms",
                    "--json", str(out), width=width)  # fmt: skip
        _assert_fits(text, width)
        headers[width] = _header(text, "concurrency")
        steps = json.loads(out.read_text())["steps"]
        rows = {line.split()[0]: line.split() for line in text.splitlines()
                if line.strip()[:1].isdigit() and line.startswith(" ")}  # fmt: skip
        for step in steps:
            row = rows[f"{step['level']:g}"]
            assert f"{step['inferences_per_second']:.1f}" in row
            assert f"{step['latency']['p95'] * 1e3:.2f}" in row
            assert f"{step['error_rate'] * 100:.1f}" in row
            if width == 120:  # every column of the table fits
                for quantile in ("p50", "p90", "p99"):
                    assert f"{step['latency'][quantile] * 1e3:.2f}" in row
                assert str(step["requests"]) in row
        assert "operating point: " in text
    assert "infer/s" in headers[80] and "p95 ms" in headers[80]
    assert set(headers[80]) < set(headers[120])
    assert set(headers[80]) < set(headers[120])


def _step(step: int, change: tuple[str, int, int] | None, throughput: float | None,
          p95: float | None, verdict: str, reason: str) -> TuneStep:  # fmt: skip
    moved = None if change is None else Change(*change, reason="")
    return TuneStep(step, moved, throughput, p95, verdict, reason)


QUEUE_DELAY = "dynamic_batching.max_queue_delay_microseconds"
TUNE_HISTORY = [
    # Steps of two `tritonwatch tune --apply --max-steps 1` runs on the simulator's
    # queue-delay-too-high scenario (their --json histories), then the other verdicts
    # with their longest reasons (tune/judge.py): recorded, so no tuner runs here.
    _step(0, None, None, 0.08687856100004865, "baseline", "current config"),
    _step(
        1,
        (QUEUE_DELAY, 80000, 40000),
        42.15313248868291,
        0.047596683999927336,
        "keep",
        "now fits the budget at 2",
    ),
    _step(
        2,
        (QUEUE_DELAY, 40000, 20000),
        73.1279930975885,
        0.028029237000055218,
        "keep",
        "throughput in budget 42.1 → 73.1/s beyond noise",
    ),
    _step(
        3,
        ("instance_group.count", 1, 2),
        71.90412,
        0.0291833,
        "inconclusive",
        "too few requests at the operating points to compare (fewer than 30)",
    ),
    _step(
        4, (QUEUE_DELAY, 20000, 10000), None, 0.0612, "revert", "nothing fits the budget any more"
    ),
]


@pytest.mark.parametrize("width", WIDTHS)
def test_tune_history_fits_the_terminal_and_keeps_its_numbers(
    width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Breaks if `tritonwatch tune`'s history table (as its command prints it, laid out
    for ``COLUMNS``) cuts its numbers or the change it proposes, overflows the terminal,
    or drops the change column on a wide one."""
    monkeypatch.setenv("COLUMNS", str(width))
    result = TuneResult(original={}, final={}, history=TUNE_HISTORY)
    console = Console(file=io.StringIO(), width=width)
    console.out("\n".join(history_lines(result)), highlight=False)  # as run_tune_command
    text = console.file.getvalue()  # type: ignore[attr-defined]
    _assert_fits(text, width)
    tokens = _tokens(text)
    for step in TUNE_HISTORY:
        assert (f"{step.throughput:.1f}" if step.throughput is not None else "none") in tokens
        assert step.p95 is None or f"{step.p95 * 1e3:.2f}" in tokens
        assert step.verdict in tokens
        assert " ".join(step.reason.split()) in " ".join(text.split())
        if step.change is not None:
            change = step.change
            assert {change.parameter, str(change.current), str(change.proposed)} <= tokens
    header = _header(text, "step")
    assert {"infer/s in budget", "p95 ms", "verdict"} <= set(header)
    if width == 120:
        assert "change" in header


def test_rules_summary_fits_the_terminal_and_counts_what_it_wrote(tmp_path: Path) -> None:
    """Breaks if `tritonwatch rules --out` prints no summary, one that disagrees with the
    file it wrote, cuts a number, or shows no more on a wider terminal."""
    config = fixtures_dir().parent.parent / "examples" / "demo.yaml"
    headers = {}
    for width in WIDTHS:
        out = tmp_path / f"rules{width}.yml"
        text = _run("rules", "--config", str(config), "--out", out.name, width=width, cwd=tmp_path)
        _assert_fits(text, width)
        headers[width] = _header(text, "target/model")
        groups = yaml.safe_load(out.read_text())["groups"]
        assert text.startswith(f"wrote {len(groups)} rule groups to {out.name} ")
        (slo_group,) = [g for g in groups if g["name"] == "tritonwatch-slo"]
        wrote = f"tritonwatch-slo: {len(slo_group['rules'])} rules for every model"
        assert wrote in " ".join(text.split())
        specs = {str(s.kind): s for s in slo_specs(load_config(config))}
        rows = [line for line in text.splitlines() if line.startswith("local/simple")]
        assert len(rows) == len(specs) == 2
        for line in rows:
            row = dict(zip(headers[width], line.split(), strict=True))
            spec = specs[row["SLO"]]
            assert row["objective %"] == f"{spec.objective * 100:.10g}"
            assert row.get("budget %", "-") in (f"{spec.error_budget * 100:.10g}", "-")
            assert row.get("min bad events", "-") in (f"{spec.min_bad_events:g}", "-")
    assert set(headers[80]) < set(headers[120])


@pytest.fixture(scope="module")
def demo_snapshot() -> Iterator[StatusSnapshot]:
    """The demo's daemon and simulator, as `tritonwatch demo` runs them, once every model
    has canary quantiles and Triton's breakdown, and the streamed one its TTFT and ITL."""
    with (
        Simulator(demo_model_set(), seed=0, response_cache_bytes=DEMO_CACHE_BYTES) as sim,
        tempfile.TemporaryDirectory() as folder,
    ):
        for model, scenario in DEMO_SCENARIOS.items():
            sim.set_scenario(scenario, model)
        path = demo_config(sim, Path(folder), "127.0.0.1:0")
        daemon = Daemon(path, load_config(path))
        daemon.start()
        try:

            def complete() -> StatusSnapshot | None:
                snapshot = daemon.status_snapshot()
                ready = all(m.quantiles.get("p95") and m.breakdown for m in snapshot.models)
                ready = ready and all(
                    m.stream.quantiles.get(measure, {}).get("p95")
                    for m in snapshot.models
                    if m.stream is not None
                    for measure in ("ttft", "itl")
                )
                return snapshot if ready and len(snapshot.models) == len(DEMO_MODELS) else None

            yield wait_until(complete, 40, "quantiles and breakdown for all demo models", 0.5)
        finally:
            daemon.stop()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_live_view_fits_the_terminal_with_every_number_whole(
    demo_snapshot: StatusSnapshot, width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Breaks if the demo's live view wraps a row over many lines, cuts a number, or
    loses a model's quantiles, budget, state, request count or (the streamed llm) its
    TTFT/ITL p95."""
    monkeypatch.setenv("COLUMNS", str(width))
    console = Console(file=io.StringIO(), record=True)  # rich reads COLUMNS, as in a terminal
    console.print(demo_screen(demo_snapshot, "http://127.0.0.1:9849"))
    text = console.export_text()
    lines = status_lines(demo_snapshot)  # laid out for COLUMNS too
    assert text.splitlines()[: len(lines)] == lines
    _assert_fits(text, width)
    for model in demo_snapshot.models:
        row = next(line.split() for line in text.splitlines()
                   if line.startswith(f"{model.target}/{model.model} "))  # fmt: skip
        assert f"{model.quantiles['p95'] * 1e3:.1f}" in row
        assert f"{model.budget_seconds * 1e3:.1f}" in row
        assert str(sum(model.outcomes.values())) in row
        assert ("ok" if model.quantiles["p95"] <= model.budget_seconds else "BREACH") in row
        if model.stream is not None:
            ttft, itl = (model.stream.quantiles[m]["p95"] * 1e3 for m in ("ttft", "itl"))
            assert f"{ttft:.1f}/{itl:.2f}" in row
        stage = next(iter(model.breakdown or {}))
        if stage != "network_client":
            assert f"={(model.breakdown or {})[stage] * 1e3:.1f}" in text
    assert any(m.stream is not None for m in demo_snapshot.models)  # the demo's llm
    if width == 120:
        narrow = _header("\n".join(status_lines(demo_snapshot, 80)), "target/model")
        assert len(_header(text, "target/model")) > len(narrow)
