"""Shared pieces of ``make bench``: result rows and tables, medians and ratios, the
Markdown report, the machine header, and a /proc sampler for footprints.

Kept free of tritonwatch imports and of I/O beyond /proc and ``--version`` calls, so
the arithmetic that decides "met" or "missed" is unit-tested on its own
(tests/test_bench_harness.py). Every figure is a median over repeats because these
machines are noisy: a single run can be off by tens of percent, a median of three
rarely is, and the min–max range printed next to it shows how noisy the run was.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Comparison = Literal[">=", "<="]


@dataclass(frozen=True)
class Goal:
    """A goal from an earlier issue: ``subject op bound``, on the ratio or on our figure.

    ``on="ratio"`` judges ours ÷ anchor (e.g. load generation ≥ 0.2 of wrk);
    ``on="ours"`` judges our figure alone (e.g. detection ≤ 60 s), for the rows whose
    anchor is a reference value rather than a competitor. With ``upper`` the goal is
    two-sided: ``bound ≤ subject ≤ upper`` (``op`` then ``">="``; e.g. a capacity
    within 25 % of perf_analyzer's is ratio in [0.75, 1.25]).
    """

    op: Comparison
    bound: float
    on: Literal["ratio", "ours"] = "ratio"
    unit: str = ""
    upper: float | None = None

    def met(self, ours: float | None, ratio: float | None) -> bool | None:
        """True/False when the figure it judges exists, None when it does not."""
        value = ratio if self.on == "ratio" else ours
        if value is None or math.isnan(value):
            return None
        if self.upper is not None and value > self.upper:
            return False
        return value >= self.bound if self.op == ">=" else value <= self.bound

    def text(self) -> str:
        subject = "ratio" if self.on == "ratio" else "ours"
        unit = f" {self.unit}" if self.unit else ""
        if self.upper is not None:
            return f"{_number(self.bound)} ≤ {subject} ≤ {_number(self.upper)}{unit}"
        return f"{subject} {'≥' if self.op == '>=' else '≤'} {_number(self.bound)}{unit}"


@dataclass(frozen=True)
class Row:
    """One line of a table: our samples and the anchor's, one per repeat.

    When both lists have one sample per repeat they are *paired* (measured in the same
    repeat, under the same machine load) and the ratio is the median of the per-repeat
    ratios, which cancels slow drifts of the machine; otherwise it is the ratio of the
    medians.
    """

    label: str
    ours: Sequence[float]
    anchor: Sequence[float] = ()
    unit: str = ""
    goal: Goal | None = None
    note: str = ""

    @property
    def ours_median(self) -> float | None:
        return median(self.ours)

    @property
    def anchor_median(self) -> float | None:
        return median(self.anchor)

    @property
    def ratio(self) -> float | None:
        if self.ours and self.anchor and len(self.ours) == len(self.anchor):
            paired = [o / a for o, a in zip(self.ours, self.anchor, strict=True) if a]
            return median(paired)
        ours, anchor = self.ours_median, self.anchor_median
        if ours is None or not anchor:
            return None
        return ours / anchor

    @property
    def met(self) -> bool | None:
        return self.goal.met(self.ours_median, self.ratio) if self.goal else None


@dataclass
class Table:
    """One benchmark's result: what was compared, the rows, and what to know about it."""

    key: str
    title: str
    ours_name: str
    anchor_name: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None
    measured: str = ""
    """When and on which commit it ran: a merged report holds tables from several runs."""

    @property
    def missed(self) -> list[Row]:
        return [row for row in self.rows if row.met is False]


def table_to_json(table: Table) -> str:
    """A table as JSON, to cross from the process that measured it to the harness."""
    return json.dumps(dataclasses.asdict(table), allow_nan=True)


def table_from_json(text: str) -> Table:
    return _table_from_data(json.loads(text))


def tables_to_json(tables: Sequence[Table]) -> str:
    """Every table of a report, kept beside it so a later partial run can merge into it."""
    return json.dumps([dataclasses.asdict(table) for table in tables], allow_nan=True, indent=1)


def tables_from_json(text: str) -> list[Table]:
    return [_table_from_data(data) for data in json.loads(text)]


def merged(kept: Sequence[Table], fresh: Sequence[Table], order: Sequence[str]) -> list[Table]:
    """``kept`` with every table of ``fresh`` put in place of the one with its key, in
    ``order`` (keys not in it last): what ``run_all.py --only … --merge`` reports."""
    by_key = {table.key: table for table in kept} | {table.key: table for table in fresh}
    rank = {key: index for index, key in enumerate(order)}
    return sorted(by_key.values(), key=lambda table: rank.get(table.key, len(rank)))


def _table_from_data(data: dict[str, Any]) -> Table:
    rows = [
        Row(**{**row, "goal": Goal(**row["goal"]) if row["goal"] else None})
        for row in data.pop("rows")
    ]
    return Table(**data, rows=rows)


def median(values: Sequence[float]) -> float | None:
    """The median of the finite values, None when there are none."""
    finite = [value for value in values if value is not None and math.isfinite(value)]
    return statistics.median(finite) if finite else None


def _number(value: float) -> str:
    """A figure as a reader wants it: thin thousands separators, 3 significant digits
    below 100, no trailing zeros."""
    if math.isnan(value):
        return "—"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}".replace(",", " ")
    if magnitude == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(magnitude)))
    text = f"{value:.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def format_value(samples: Sequence[float], unit: str = "") -> str:
    """Median with unit, and the min–max range when there was more than one repeat."""
    middle = median(samples)
    if middle is None:
        return "—"
    text = _number(middle) + (f" {unit}" if unit else "")
    finite = [value for value in samples if math.isfinite(value)]
    if len(finite) > 1:
        text += f" [{_number(min(finite))}–{_number(max(finite))}]"
    return text


def format_ratio(ratio: float | None) -> str:
    """Two decimals where ratios near 1 matter, three below 0.1, three digits from 10."""
    if ratio is None or math.isnan(ratio):
        return "—"
    if ratio >= 10:
        return _number(ratio)
    return f"{ratio:.3f}" if ratio < 0.1 else f"{ratio:.2f}"


def _met_text(met: bool | None) -> str:
    return {True: "met", False: "**missed**", None: "—"}[met]


def render_table(table: Table) -> str:
    """The table in Markdown (read equally well on a terminal and on GitHub)."""
    lines = [f"### {table.title}", ""]
    if table.error is not None:
        lines += [f"**failed**: `{table.error}`", ""]
    if table.rows:
        lines += [
            f"| measurement | ours ({table.ours_name}) | anchor ({table.anchor_name}) "
            "| ratio ours/anchor | goal | goal met? |",
            "|---|---|---|---|---|---|",
        ]
        for row in table.rows:
            label = f"{row.label} ({row.note})" if row.note else row.label
            lines.append(
                f"| {label} | {format_value(row.ours, row.unit)} "
                f"| {format_value(row.anchor, row.unit)} | {format_ratio(row.ratio)} "
                f"| {row.goal.text() if row.goal else '—'} | {_met_text(row.met)} |"
            )
        lines.append("")
    lines += [f"* {note}" for note in table.notes]
    if table.seconds:
        lines.append(f"* benchmark ran {table.seconds:.0f} s")
    if table.measured:
        lines.append(f"* measured {table.measured}")
    return "\n".join(lines).rstrip() + "\n"


def render_report(header: dict[str, str], tables: Sequence[Table], preface: str = "") -> str:
    """The whole RESULTS.md: header, one summary line per table, then every table."""
    lines = ["# Benchmark results", ""]
    if preface:
        lines += [preface, ""]
    lines += ["| | |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in header.items()]
    lines += ["", "## Summary", "", "| benchmark | goals met | missed |", "|---|---|---|"]
    for table in tables:
        judged = [row for row in table.rows if row.met is not None]
        missed = ", ".join(row.label for row in table.missed) or "—"
        if table.error is not None:
            missed = f"failed: {table.error}"
        met = f"{sum(1 for r in judged if r.met)} of {len(judged)}" if judged else "no goal set"
        lines.append(f"| {table.title} | {met} | {missed} |")
    lines += ["", "## Results", ""]
    for table in tables:
        lines += [render_table(table)]
    return "\n".join(lines).rstrip() + "\n"


# --- the machine and the versions --------------------------------------------------


def cpu_model(cpuinfo: str) -> str:
    """The first ``model name`` of /proc/cpuinfo (``Hardware``/``Processor`` on ARM)."""
    for key in ("model name", "Hardware", "Processor"):
        match = re.search(rf"^{key}\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
        if match:
            return match.group(1).strip()
    return platform.processor() or platform.machine()


def _tool_version(command: Sequence[str]) -> str:
    """First line a tool prints about its version, or why there is none."""
    if shutil.which(command[0]) is None:
        return "not installed"
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unknown ({error})"
    text = (done.stdout or done.stderr).strip().splitlines()
    return text[0].strip() if text else "unknown"


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine_header(command: str, started: datetime.datetime, seconds: float) -> dict[str, str]:
    """Date, machine, and the version of everything a figure depends on."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    try:
        memory_kib = int(re.findall(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text())[0])
        memory = f"{memory_kib / 2**20:.1f} GiB"
    except (OSError, IndexError):
        memory = "unknown"
    return {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "command": f"`{command}`",
        "total runtime": f"{seconds / 60:.1f} min",
        "machine": f"{os.cpu_count()} CPUs (`nproc` {len(os.sched_getaffinity(0))}), "
        f"{cpu_model(cpuinfo)}, {memory}, {platform.system()} {platform.release()}",
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "tritonwatch": _package_version("tritonwatch"),
        "tritonclient": _package_version("tritonclient"),
        "prometheus_client": _package_version("prometheus-client"),
        "grpcio": _package_version("grpcio"),
        "wrk": _tool_version(["wrk", "--version"]).split(" Copyright")[0],
        "nginx": _tool_version(["nginx", "-v"]),
        "prometheus-node-exporter": _tool_version(["prometheus-node-exporter", "--version"]),
        "alertmanager": _tool_version(["prometheus-alertmanager", "--version"]),
    }


# --- footprint sampling from /proc -------------------------------------------------


def rss_bytes(status_text: str) -> int:
    """VmRSS of a /proc/PID/status text, in bytes."""
    match = re.search(r"^VmRSS:\s+(\d+)\s+kB", status_text, re.MULTILINE)
    if match is None:
        raise ValueError("no VmRSS line (a zombie or a kernel thread?)")
    return int(match.group(1)) * 1024


def cpu_ticks(stat_text: str) -> int:
    """utime + stime of a /proc/PID/stat text, in clock ticks. The command name in
    parentheses may hold spaces and parentheses, so fields count from the last ')'."""
    fields = stat_text.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


@dataclass(frozen=True)
class ProcSample:
    at: float
    """time.monotonic() when read"""
    rss: int
    cpu_seconds: float


def read_proc(pid: int) -> ProcSample:
    """One sample of a running process (OSError once it is gone)."""
    at = time.monotonic()
    status = Path(f"/proc/{pid}/status").read_text()
    stat = Path(f"/proc/{pid}/stat").read_text()
    return ProcSample(at, rss_bytes(status), cpu_ticks(stat) / os.sysconf("SC_CLK_TCK"))


@dataclass(frozen=True)
class Footprint:
    """Average CPU (percent of one core) and RSS statistics over a series of samples."""

    cpu_percent: float
    rss_median: float
    rss_max: float
    samples: int
    seconds: float


def footprint(samples: Sequence[ProcSample]) -> Footprint:
    """CPU% from the first to the last sample (so ticks between samples are not lost),
    RSS median and maximum over all samples."""
    if len(samples) < 2:
        raise ValueError("a footprint needs at least two samples")
    first, last = samples[0], samples[-1]
    seconds = last.at - first.at
    rss = [sample.rss for sample in samples]
    return Footprint(
        cpu_percent=100.0 * (last.cpu_seconds - first.cpu_seconds) / seconds if seconds else 0.0,
        rss_median=float(statistics.median(rss)),
        rss_max=float(max(rss)),
        samples=len(samples),
        seconds=seconds,
    )
