"""``tritonwatch sweep`` against the real ``perf_analyzer --concurrency-range``, on real Triton.

One private ``tritonserver`` 2.51 (tests/real_triton.py) serves ``batching`` (2 ms +
0.2 ms per row, max batch 8, dynamic batching). For each protocol and concurrency
level both tools measure the same model one after the other, in alternating order
from repeat to repeat (ours, theirs; theirs, ours; ...), each as a fresh process:

* perf_analyzer ``-m batching -i grpc|http --concurrency-range L:L --input-data zero
  --measurement-interval W --percentile 95 -s 10 --max-trials N -f out.csv`` (one level
  per run: its range has no doubling, and a level that never settles ends a range run);
* ``tritonwatch sweep --concurrency L --measurement-interval W --max-windows N --csv``.

Both keep measuring until the last three windows agree within 10 % on throughput and
p95 (``--percentile 95`` makes perf_analyzer judge p95 too; by default it judges the
mean), and both report the merged last three windows: inferences/s and the p95 of the
client's latency per request. Their CSVs are read with the same reader. The client
CPU of each run (the tool and its worker processes, from the kernel's accounting of
the child) is recorded too: both tools share the machine's cores with Triton.

    python benchmarks/sweep_vs_perf_analyzer.py [--quick] [--repeats 3] [--window 5]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from perf_analyzer_support import proxy_free_environment, read_csv
from real_triton import RealTriton, perf_analyzer_binary
from support import TRITONWATCH

MODEL = "batching"
LEVELS = (1, 2, 4, 8)
PROTOCOLS = ("grpc", "http")
THROUGHPUT_GOAL = 0.05
"""Ours within ±5 % of perf_analyzer's inferences/s (issue 15)."""
P95_GOAL = 0.10
"""Ours within ±10 % of perf_analyzer's p95 (issue 15)."""
RUN_TIMEOUT_SECONDS = 300.0


@dataclass(frozen=True)
class Sample:
    """One tool's figures for one level in one repeat (NaN when the run gave none)."""

    tool: str
    """``ours`` or ``perf_analyzer``."""
    protocol: str
    level: int
    repeat: int
    inferences_per_second: float
    p95_us: float
    p50_us: float
    client_cpu_seconds: float
    wall_seconds: float
    batch: float = math.nan
    """The server's average batch size over the reported windows (its statistics)."""
    note: str = ""

    @property
    def cpu_per_inference_us(self) -> float:
        """The tool's CPU over the whole run (warm-up and unstable windows included)
        per inference of its reported rate, a rough cost figure."""
        done = self.inferences_per_second * self.wall_seconds
        return self.client_cpu_seconds / done * 1e6 if done > 0 else math.nan


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(command: Sequence[str]) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Runs ``command``; (result, its CPU seconds with its children, its wall seconds)."""
    cpu, started = _children_cpu(), time.monotonic()
    done = subprocess.run(
        list(command),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        env=proxy_free_environment(),
        check=False,
    )
    return done, _children_cpu() - cpu, time.monotonic() - started


def _figures(path: Path, level: int) -> tuple[float, float, float] | None:
    """(inferences/s, p95 µs, p50 µs) of ``level`` in a perf_analyzer-style CSV."""
    if not path.exists():
        return None
    _, rows = read_csv(path)
    for row in rows:
        if float(row["Concurrency"]) == level:
            return (
                float(row["Inferences/Second"]),
                float(row["p95 latency"]),
                float(row["p50 latency"]),
            )
    return None


_PASS = re.compile(r"Pass \[\d+\] throughput: ([\d.]+) infer/sec\. p95 latency: (\d+) usec")
_COUNTS = re.compile(r"Inference count: (\d+)\s+Execution count: (\d+)")


def _batch(tool: str, stdout: str, json_path: Path) -> float:
    """Average batch size Triton formed: perf_analyzer prints the server's counts of
    the merged windows; our ``--json`` has them per step."""
    if tool == "perf_analyzer":
        found = _COUNTS.search(stdout)
        return int(found[1]) / int(found[2]) if found and int(found[2]) else math.nan
    if not json_path.exists():
        return math.nan
    steps = json.loads(json_path.read_text())["steps"]
    server = steps[0]["server"] if steps else None
    return float(server["batch_size_average"] or math.nan) if server else math.nan


def _sample(tool: str, protocol: str, level: int, *, repeat: int, csv_path: Path,
            command: Sequence[str]) -> Sample:  # fmt: skip
    done, cpu, wall = _run(command)
    figures = _figures(csv_path, level)
    note = ""
    if figures is None and tool == "perf_analyzer":
        figures, note = _unstable_figures(done.stdout)
    if figures is None:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        note = f"exit {done.returncode}: {tail[0][:160]}"
        return Sample(tool, protocol, level, repeat, math.nan, math.nan, math.nan, cpu, wall,
                      note=note)  # fmt: skip
    batch = _batch(tool, done.stdout, csv_path.with_suffix(".json"))
    return Sample(tool, protocol, level, repeat, *figures, cpu, wall, batch, note)


def _unstable_figures(stdout: str) -> tuple[tuple[float, float, float] | None, str]:
    """A perf_analyzer level that never settled writes no row; its last three windows
    (``-v``) are what our sweep reports for an unstable step: mean throughput, and the
    median of the three windows' p95 (theirs are not merged sample by sample)."""
    passes = _PASS.findall(stdout)[-3:]
    if len(passes) < 3:
        return None, ""
    throughput = statistics.mean(float(t) for t, _ in passes)
    p95 = statistics.median(float(p) for _, p in passes)
    return (throughput, p95, math.nan), "unstable: last 3 windows"


def perf_analyzer_command(server: RealTriton, protocol: str, level: int, *, window: float,
                          max_windows: int, out: Path) -> list[str]:  # fmt: skip
    url = server.grpc_address if protocol == "grpc" else f"127.0.0.1:{server.http_port}"
    return [
        str(perf_analyzer_binary()), "-m", MODEL, "-u", url, "-i", protocol,
        "--concurrency-range", f"{level}:{level}", "--input-data", "zero",
        "--measurement-interval", str(round(window * 1000)), "--max-trials", str(max_windows),
        "-s", "10", "--percentile", "95", "-v", "-f", str(out),
    ]  # fmt: skip


def sweep_command(server: RealTriton, protocol: str, level: int, *, window: float,
                  max_windows: int, out: Path) -> list[str]:  # fmt: skip
    url = server.grpc_url if protocol == "grpc" else server.http_url
    return [
        TRITONWATCH, "sweep", "--url", url, "--model", MODEL, "--concurrency", str(level),
        "--measurement-interval", f"{window:g}s", "--max-windows", str(max_windows),
        "--csv", str(out), "--json", str(out.with_suffix(".json")),
    ]  # fmt: skip


def measure(
    levels: Sequence[int] = LEVELS,
    protocols: Sequence[str] = PROTOCOLS,
    *,
    repeats: int = 3,
    window: float = 5.0,
    max_windows: int = 10,
    progress: bool = False,
) -> list[Sample]:
    """Both tools at every (protocol, level), ``repeats`` times, interleaved; one
    server for the whole run, warmed up by a first short perf_analyzer run."""
    samples: list[Sample] = []
    server = RealTriton([MODEL]).start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            scratch = Path(tmp)
            warm = perf_analyzer_command(
                server, "grpc", max(levels), window=0.5, max_windows=3, out=scratch / "w.csv"
            )
            _run(warm)  # Python-backend stub and batcher warm, caches filled
            for repeat in range(repeats):
                for protocol in protocols:
                    for index, level in enumerate(levels):
                        tools = ["ours", "perf_analyzer"]
                        if (repeat + index) % 2:
                            tools.reverse()
                        for tool in tools:
                            out = scratch / f"{tool}-{protocol}-{level}-{repeat}.csv"
                            build = sweep_command if tool == "ours" else perf_analyzer_command
                            command = build(server, protocol, level, window=window,
                                            max_windows=max_windows, out=out)  # fmt: skip
                            sample = _sample(tool, protocol, level, repeat=repeat, csv_path=out,
                                             command=command)  # fmt: skip
                            samples.append(sample)
                            if progress:
                                print(_sample_line(sample), flush=True)
    finally:
        server.stop()
    return samples


@dataclass(frozen=True)
class Agreement:
    """Medians, ranges and paired ratios of one (protocol, level)."""

    protocol: str
    level: int
    ours_throughput: list[float]
    theirs_throughput: list[float]
    ours_p95_us: list[float]
    theirs_p95_us: list[float]

    @staticmethod
    def _paired(ours: list[float], theirs: list[float]) -> float:
        ratios = [o / t for o, t in zip(ours, theirs, strict=True) if _finite(o, t) and t]
        return statistics.median(ratios) if ratios else math.nan

    @property
    def throughput_ratio(self) -> float:
        return self._paired(self.ours_throughput, self.theirs_throughput)

    @property
    def p95_ratio(self) -> float:
        return self._paired(self.ours_p95_us, self.theirs_p95_us)

    @property
    def met(self) -> bool:
        return (
            abs(self.throughput_ratio - 1) <= THROUGHPUT_GOAL
            and abs(self.p95_ratio - 1) <= P95_GOAL
        )


def _finite(*values: float) -> bool:
    return all(math.isfinite(v) for v in values)


def agreements(samples: Sequence[Sample]) -> list[Agreement]:
    """Pairs each repeat's two samples per (protocol, level)."""
    keys = sorted({(s.protocol, s.level) for s in samples}, key=lambda k: (k[0], k[1]))
    result = []
    for protocol, level in keys:
        by_tool: dict[str, list[Sample]] = {"ours": [], "perf_analyzer": []}
        for sample in samples:
            if (sample.protocol, sample.level) == (protocol, level):
                by_tool[sample.tool].append(sample)
        ours = sorted(by_tool["ours"], key=lambda s: s.repeat)
        theirs = sorted(by_tool["perf_analyzer"], key=lambda s: s.repeat)
        result.append(
            Agreement(
                protocol,
                level,
                [s.inferences_per_second for s in ours],
                [s.inferences_per_second for s in theirs],
                [s.p95_us for s in ours],
                [s.p95_us for s in theirs],
            )
        )
    return result


def median_text(values: list[float]) -> str:
    """Median [min–max] of the finite values, whole numbers (µs, inferences/s)."""
    return _range(values)


def _range(values: list[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "—"
    middle = statistics.median(finite)
    if len(finite) == 1:
        return f"{middle:.0f}"
    return f"{middle:.0f} [{min(finite):.0f}–{max(finite):.0f}]"


def _sample_line(sample: Sample) -> str:
    return (
        f"{sample.protocol} c={sample.level} r{sample.repeat} {sample.tool:13s} "
        f"{sample.inferences_per_second:8.1f} infer/s  p50 {sample.p50_us:6.0f} µs  "
        f"p95 {sample.p95_us:6.0f} µs  cpu {sample.client_cpu_seconds:5.2f} s "
        f"/ {sample.wall_seconds:5.1f} s  batch {sample.batch:4.2f}  {sample.note}"
    )


def report(samples: Sequence[Sample]) -> str:
    lines = [
        "| protocol | concurrency | ours infer/s | perf_analyzer infer/s | ratio "
        "| ours p95 µs | perf_analyzer p95 µs | ratio | goal met? |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for a in agreements(samples):
        lines.append(
            f"| {a.protocol} | {a.level} | {_range(a.ours_throughput)} "
            f"| {_range(a.theirs_throughput)} | {a.throughput_ratio:.3f} "
            f"| {_range(a.ours_p95_us)} | {_range(a.theirs_p95_us)} | {a.p95_ratio:.3f} "
            f"| {'met' if a.met else 'missed'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 repeat of 1 s windows")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--window", type=float, default=5.0, help="seconds per window")
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)))
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    parser.add_argument("--json", type=Path, default=None, help="write every sample")
    args = parser.parse_args()
    repeats, window = (1, 1.0) if args.quick else (args.repeats, args.window)
    print(f"load before: {os.getloadavg()}", flush=True)
    samples = measure(
        [int(level) for level in args.levels.split(",")],
        args.protocols.split(","),
        repeats=repeats,
        window=window,
        progress=True,
    )
    print(f"load after: {os.getloadavg()}")
    print(report(samples))
    if args.json:
        args.json.write_text(json.dumps([asdict(s) for s in samples], indent=1))


if __name__ == "__main__":
    main()
