"""The daemon's capacity and headroom against real perf_analyzer, on real Triton.

One private ``tritonserver`` 2.51 (tests/real_triton.py) serves ``saturating`` (one
instance, no batching, 20 ms an execution: at most about 50 inferences/s). The latency
budget is a p95 of 100 ms. In order, each tool alone on the server:

1. perf_analyzer closed loop: ``--concurrency-range 1:8 --percentile 95
   --latency-threshold 100``, its highest-throughput ``-f`` CSV row with p95 ≤ 100 ms;
2. perf_analyzer open loop: ``--request-rate-range`` from 50 % to 110 % of that figure
   in steps of 5 % with ``--request-distribution poisson`` (Poisson arrivals, as the
   daemon's open-loop check sends), read the same way;
3. ``tritonwatch run`` (a subprocess) with scheduled sweeps on (concurrency 1, 2, 4, 8,
   the first sweep a second after start) and the same budget: its
   ``tritonwatch_capacity_closed_loop_inferences_per_second`` against (1), its
   ``tritonwatch_capacity_inferences_per_second`` (the open-loop check's figure) against (2);
4. with the daemon still running, perf_analyzer open loop at half the daemon's capacity
   less the canary's rate: ``tritonwatch_capacity_headroom_ratio``, the median of
   several scrapes once the load settled, against 1 − offered / capacity (0.5).

perf_analyzer stops a range at the first level whose p95 reaches the threshold and
writes only the levels under it; its stability check is opened wide (``-s 1000``) so
that, like the daemon's sweep, only the latency budget ends a search (a level whose
windows differ more than 10 % is still a level the server held). Its ``-v`` windows of
the first level over the budget say what the open loop's p95 was there.

    python benchmarks/capacity_accuracy.py [--quick]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from harness import Goal, Row, Table

from capacity_support import BUDGET_MS, MODEL, swept_config
from perf_analyzer_support import proxy_free_environment, read_csv
from real_triton import RealTriton, perf_analyzer_binary
from support import DaemonProcess, sample_value, wait_until

CANARY_RATE = 2.0
"""The daemon's canary, requests/s: part of the load the headroom reads."""
LEVELS = (1, 2, 4, 8)
OPEN_LOOP_SHARES = (0.5, 1.1, 0.05)
"""perf_analyzer's request-rate range as shares of its closed loop's capacity."""
CAPACITY_GOAL = Goal(">=", 0.75, upper=1.25)
"""Ours within 25 % of perf_analyzer's highest in-budget throughput (issue 38)."""
HEADROOM_GOAL = Goal(">=", 0.3, on="ours", upper=0.7)
"""Headroom 0.5 ± 0.2 at half the capacity (issue 38)."""
RUN_TIMEOUT_SECONDS = 240.0
CAPACITY = "tritonwatch_capacity_inferences_per_second"
CLOSED_LOOP = "tritonwatch_capacity_closed_loop_inferences_per_second"
LOAD = "tritonwatch_capacity_load_inferences_per_second"
HEADROOM = "tritonwatch_capacity_headroom_ratio"
SWEEP_THROUGHPUT = "tritonwatch_sweep_throughput_inferences_per_second"
SWEEP_LATENCY = "tritonwatch_sweep_latency_seconds"


# --- pure helpers (tests/test_capacity_accuracy.py) -------------------------------------


@dataclass(frozen=True)
class Point:
    """One level of a load: the level (concurrency or requests/s), inferences/s, p95 s."""

    level: float
    inferences_per_second: float
    p95: float


def csv_points(rows: Sequence[Mapping[str, str]], level_column: str) -> list[Point]:
    """The rows of a perf_analyzer ``-f`` CSV (``p95 latency`` in µs) as points."""
    return [
        Point(
            float(row[level_column]),
            float(row["Inferences/Second"]),
            float(row["p95 latency"]) / 1e6,
        )
        for row in rows
    ]


def best_in_budget(points: Sequence[Point], budget_seconds: float) -> Point | None:
    """The point with the highest inferences/s whose p95 is at most the budget; None
    when none is."""
    inside = [p for p in points if p.p95 <= budget_seconds]
    return max(inside, key=lambda p: p.inferences_per_second, default=None)


_RATE = re.compile(r"^Request Rate: ([\d.]+) inference requests per seconds", re.MULTILINE)
_PASS = re.compile(r"Pass \[\d+\] throughput: ([\d.]+) infer/sec\. p95 latency: (\d+) usec")


def rate_windows(stdout: str) -> dict[float, list[Point]]:
    """Every measurement window perf_analyzer ``-v`` printed, by request rate, in order
    (the levels over the threshold included, which its CSV leaves out)."""
    windows: dict[float, list[Point]] = {}
    starts = list(_RATE.finditer(stdout))
    for index, start in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(stdout)
        rate = float(start[1])
        windows[rate] = [
            Point(rate, float(throughput), int(p95) / 1e6)
            for throughput, p95 in _PASS.findall(stdout, start.end(), end)
        ]
    return windows


def left_out(windows: Mapping[float, Sequence[Point]], kept: Sequence[Point]) -> list[Point]:
    """The windows of the lowest rate perf_analyzer measured but left out of its CSV
    (the level over the threshold that ended its range); empty when it left none out."""
    dropped = [
        rate
        for rate in windows
        if windows[rate] and all(abs(rate - p.level) > 1e-6 * rate for p in kept)
    ]
    return list(windows[min(dropped)]) if dropped else []


def sweep_steps(metrics: str, model: str) -> list[Point]:
    """The daemon's last scheduled sweep of ``model`` from its /metrics exposition: one
    point per concurrency level, in level order."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    throughput: dict[float, float] = {}
    p95: dict[float, float] = {}
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.labels.get("model") != model or "concurrency" not in sample.labels:
                continue
            level = float(sample.labels["concurrency"])
            if sample.name == SWEEP_THROUGHPUT:
                throughput[level] = float(sample.value)
            elif sample.name == SWEEP_LATENCY and sample.labels.get("quantile") == "0.95":
                p95[level] = float(sample.value)
    return [
        Point(level, throughput[level], p95[level]) for level in sorted(throughput) if level in p95
    ]


# --- the measurement -----------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    pa_closed: list[Point]
    """perf_analyzer's closed loop, every level under the threshold (its CSV)."""
    pa_open: list[Point]
    """perf_analyzer's open loop, every rate under the threshold (its CSV)."""
    pa_over: list[Point]
    """The windows of the open-loop rate over the threshold that ended its range."""
    closed: float
    capacity: float
    steps: list[Point]
    """The daemon's sweep by concurrency, from its /metrics."""
    offered: float
    """perf_analyzer's rate plus the canary's during the headroom reading."""
    loads: list[float]
    headrooms: list[float]
    sweeps: int
    """Scheduled sweeps the daemon started in all (one expected)."""


def _perf_analyzer(triton: RealTriton, window_ms: int, *load: str) -> list[str]:
    options = (
        f"-m {MODEL} -u 127.0.0.1:{triton.http_port} -i http --input-data zero "
        f"--percentile 95 --measurement-interval {window_ms} --max-trials 5 -s 1000 "
        "--max-threads 64 -v"
    )
    return [str(perf_analyzer_binary()), *options.split(), *load]


def _in_budget_run(command: list[str], out: Path, level_column: str) -> tuple[list[Point], str]:
    """perf_analyzer with the latency threshold: its CSV's levels, and its output."""
    done = subprocess.run(
        [*command, "--latency-threshold", str(BUDGET_MS), "-f", str(out)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        env=proxy_free_environment(),
        check=False,
    )
    points = csv_points(read_csv(out)[1], level_column) if out.exists() else []
    if not points:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        print(f"perf_analyzer: no level under the threshold (exit {done.returncode}): {tail[0]}")
    return points, done.stdout


def _config(triton: RealTriton, window: float, path: Path) -> Path:
    config = swept_config(
        triton, canary_rate=CANARY_RATE, window_seconds=window, max_windows=5, levels=LEVELS
    )
    path.write_text(config)
    return path


def _wait_for(daemon: DaemonProcess, name: str, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while (value := sample_value(daemon.metrics(), name, [("model", MODEL)])) is None:
        if time.monotonic() > deadline or daemon.process.poll() is not None:
            raise RuntimeError(f"no {name} within {timeout:g} s")
        time.sleep(0.5)
    return value


def _wait_for_sweep(daemon: DaemonProcess, timeout: float) -> None:
    """Until the daemon's first scheduled sweep finished; raises when it failed."""
    ended = wait_until(
        lambda: next(
            (e for e in daemon.events if e.get("event") in ("sweep_finished", "sweep_failed")),
            None,
        ),
        timeout,
        "the daemon's first sweep",
        0.5,
    )
    if ended["event"] == "sweep_failed":
        raise RuntimeError(f"the daemon's sweep failed: {ended.get('error')}")


def _anchors(triton: RealTriton, window_ms: int, scratch: Path) -> tuple[list[Point], ...]:
    """perf_analyzer's closed loop, open loop, and the open-loop rate that ended it."""
    budget = BUDGET_MS / 1000
    warm = _perf_analyzer(triton, 500, "--concurrency-range", "2:2")
    _in_budget_run(warm, scratch / "warm.csv", "Concurrency")  # the backend's stub warm
    closed, _ = _in_budget_run(
        _perf_analyzer(triton, window_ms, "--concurrency-range", f"1:{max(LEVELS)}"),
        scratch / "closed.csv",
        "Concurrency",
    )
    best = best_in_budget(closed, budget)
    reference = best.inferences_per_second if best else 50.0
    low, high, step = (reference * share for share in OPEN_LOOP_SHARES)
    opened, output = _in_budget_run(
        _perf_analyzer(
            triton,
            window_ms,
            "--request-rate-range",
            f"{low:.2f}:{high:.2f}:{step:.2f}",
            "--request-distribution",
            "poisson",
        ),
        scratch / "open.csv",
        "Request Rate",
    )
    return closed, opened, left_out(rate_windows(output), opened)


def measure(quick: bool = False) -> Result:
    """One run (about 3 minutes; ``quick``: 1 s windows, fewer scrapes)."""
    window = 1.0 if quick else 2.0
    samples, settle = (4, 3.0) if quick else (8, 5.0)
    triton = RealTriton([MODEL]).start()
    steady: subprocess.Popen[str] | None = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            scratch = Path(tmp)
            pa_closed, pa_open, pa_over = _anchors(triton, round(window * 1000), scratch)
            daemon = DaemonProcess(_config(triton, window, scratch / "tritonwatch.yaml"))
            try:
                _wait_for_sweep(daemon, RUN_TIMEOUT_SECONDS)
                closed = _wait_for(daemon, CLOSED_LOOP, 30)
                capacity = _wait_for(daemon, CAPACITY, 10)
                steps = sweep_steps(daemon.metrics(), MODEL)
                rate = capacity / 2 - CANARY_RATE
                steady = subprocess.Popen(
                    _perf_analyzer(triton, 60_000, "--request-rate-range", f"{rate:.2f}"),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    text=True,
                    env=proxy_free_environment(),
                )
                time.sleep(settle)
                loads: list[float] = []
                headrooms: list[float] = []
                for _ in range(samples):
                    metrics = daemon.metrics()
                    load = sample_value(metrics, LOAD, [("model", MODEL)])
                    headroom = sample_value(metrics, HEADROOM, [("model", MODEL)])
                    if load is not None and headroom is not None:
                        loads.append(load)
                        headrooms.append(headroom)
                    time.sleep(1.0)
                sweeps = sum(1 for event in daemon.events if event.get("event") == "sweep_started")
                return Result(
                    pa_closed,
                    pa_open,
                    pa_over,
                    closed,
                    capacity,
                    steps,
                    round(rate, 2) + CANARY_RATE,
                    loads,
                    headrooms,
                    sweeps,
                )
            finally:
                daemon.stop()
    finally:
        if steady is not None:
            steady.kill()
            steady.wait(timeout=30)
        triton.stop()


# --- the table -----------------------------------------------------------------------------


def _figure(point: Point | None) -> float:
    return float("nan") if point is None else point.inferences_per_second


def _level(point: Point | None) -> str:
    return "—" if point is None else f"{point.level:g}"


def _curve(points: Sequence[Point], unit: str) -> str:
    return ", ".join(
        f"{p.level:g}{unit}: {p.inferences_per_second:.1f}/s p95 {p.p95 * 1e3:.0f} ms"
        for p in points
    )


def table(quick: bool) -> Table:
    """Measures once and tabulates it against the goals of issue 38."""
    result = measure(quick)
    budget = BUDGET_MS / 1000
    pa_closed = best_in_budget(result.pa_closed, budget)
    pa_open = best_in_budget(result.pa_open, budget)
    ours_closed = best_in_budget(result.steps, budget)
    anchor_ratio = _figure(pa_open) / _figure(pa_closed)
    table = Table(
        "capacity",
        f"9. Capacity and headroom against perf_analyzer, real Triton (`{MODEL}`, "
        f"p95 ≤ {BUDGET_MS} ms)",
        "tritonwatch run, scheduled sweep",
        f"perf_analyzer --latency-threshold {BUDGET_MS}",
    )
    table.rows += [
        Row(
            "closed loop: highest in-budget inferences/s",
            [result.closed],
            [_figure(pa_closed)],
            unit="/s",
            goal=CAPACITY_GOAL,
            note=f"ours at concurrency {_level(ours_closed)}, perf_analyzer at {_level(pa_closed)}",
        ),
        Row(
            "open loop: highest in-budget inferences/s (the capacity exported)",
            [result.capacity],
            [_figure(pa_open)],
            unit="/s",
            goal=CAPACITY_GOAL,
            note=f"perf_analyzer's rate {_level(pa_open)}/s",
        ),
        Row("open loop ÷ closed loop", [result.capacity / result.closed], [anchor_ratio]),
        Row(
            "load read at half the capacity",
            result.loads,
            [result.offered],
            unit="/s",
            note=f"offered: perf_analyzer {result.offered - CANARY_RATE:.2f}/s + canary "
            f"{CANARY_RATE:g}/s; read {', '.join(f'{v:.2f}' for v in sorted(result.loads))}",
        ),
        Row(
            "headroom at half the capacity",
            result.headrooms,
            [1 - result.offered / result.capacity],
            goal=HEADROOM_GOAL,
            note="anchor: 1 − offered ÷ capacity; "
            + ", ".join(f"{h:.3f}" for h in sorted(result.headrooms)),
        ),
    ]
    over = (
        f"{result.pa_over[0].level:.1f}/s ended its range: window p95 "
        + ", ".join(f"{p.p95 * 1e3:.0f}" for p in result.pa_over)
        + " ms"
        if result.pa_over
        else "no rate of its range went over the budget"
    )
    table.notes += [
        f"A private tritonserver 2.51 (CPU) serving `{MODEL}` (one instance, no batching, "
        "20 ms an execution). One run, each tool alone on the server. perf_analyzer over "
        f"HTTP: closed loop `--concurrency-range 1:{max(LEVELS)}`, then open loop "
        "`--request-rate-range` from 50 to 110 % of its closed-loop figure in 5 % steps "
        "(`--request-distribution poisson`), "
        f"`--percentile 95 --latency-threshold {BUDGET_MS} -s 1000`, "
        f"{1 if quick else 2} s windows; its highest-throughput CSV row with p95 ≤ "
        f"{BUDGET_MS} ms. Then `tritonwatch run` with scheduled sweeps (concurrency "
        f"{', '.join(map(str, LEVELS))}, the same windows; the open-loop check, Poisson "
        "arrivals, from 100 % of the closed loop down by tenths), "
        f"canary {CANARY_RATE:g}/s, scrapes every second; every figure of ours is a gauge "
        "of its /metrics.",
        f"The daemon's sweep: {_curve(result.steps, '')}; its open loop held "
        f"{result.capacity / result.closed:.0%} of its closed loop's throughput.",
        f"perf_analyzer, closed loop: {_curve(result.pa_closed, '')}; open loop: "
        f"{_curve(result.pa_open, '/s')}; {over}.",
        f"Headroom: perf_analyzer open loop at half the daemon's capacity less the canary, "
        f"{len(result.headrooms)} scrapes a second apart after {3 if quick else 5} s; "
        f"median [min–max]. Sweeps the daemon ran: {result.sweeps}. Goals (issue 38): "
        "capacity within 25 % of perf_analyzer's, closed and open loop alike; headroom "
        "0.5 ± 0.2.",
    ]
    return table


def main() -> None:
    import harness  # noqa: PLC0415

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 s windows, fewer scrapes")
    args = parser.parse_args()
    print(harness.render_table(table(args.quick)))


if __name__ == "__main__":
    main()
