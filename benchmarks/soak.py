"""Soak: the daemon watching 20 simulated models on fast intervals; does it grow?

A leak in an always-on daemon shows as memory, threads or open files that keep rising
long after start-up. This runs the built-in simulator with 20 models (ten ``simple``,
ten ``resnet50``; half canaried over HTTP, half over gRPC) and the real daemon
(``tritonwatch run``) with every periodic job accelerated: canary 2/s per model, Triton
scrape, NVML sampling (the recorded H200 replayed by ``FakeNvml``), SLO/advisor/alert
evaluation and SLO state saving all every 1–2 s, and /metrics scraped every 2 s as
Prometheus would. Every ``--sample-interval`` it reads the daemon's VmRSS and Threads
from /proc/PID/status and counts /proc/PID/fd.

After ``--warm-up`` (imports, first scrapes, histograms and windows filling up) the
value at the end of the warm-up is the baseline; growth is the largest value after it
minus the baseline, and the least-squares slope of RSS over the post-warm-up samples
(MB/hour) is reported beside it, since one noisy sample moves the maximum but hardly
the slope. Goal: RSS growth ≤ 5 MB, threads and open files no more than +2 (jitter:
a connection or worker thread that happens to be open at a sample).

Not all growth is a leak: the canary keeps five minutes of latencies for its window
quantiles (40 requests/s here: about 1.5 MB, found with tracemalloc), so RSS rises by
design for the first five minutes; with a shorter warm-up that fill-up is counted as
growth (about 1 MB of it with the default 2 minutes), and a warm-up past 5 minutes
measures the steady state alone.

    python benchmarks/soak.py [--duration 30m] [--warm-up 2m] [--sample-interval 10s]
                              [--csv soak.csv] [--nvml fake|none] [--reload-every 0]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from footprint import model_set

from sim_process import SimProcess
from support import TRITONWATCH, fixtures_dir, wait_until
from tritonwatch.config.units import parse_duration

MODELS = 20
GPUS = 4
RSS_GOAL_MB = 5.0
COUNT_JITTER = 2
MB = 1024 * 1024

# The daemon with the recorded H200 as its NVML library, and SLO state saved every 2 s
# instead of every minute: the parts of a long run a soak must reach in minutes.
# FakeNvml keeps a list of every call for tests to inspect; a bounded deque stops the
# stand-in itself from growing, which would read as the daemon's leak.
_DAEMON_WITH_FAKE_NVML = """
import collections, sys, time
from tritonwatch.scrape.nvml_fake import FakeNvml
fake = FakeNvml.from_file(sys.argv.pop(1), gpus=int(sys.argv.pop(1)), clock=time.monotonic)
fake.calls = collections.deque(maxlen=256)
sys.modules["pynvml"] = fake
import tritonwatch.runtime.job_plan
tritonwatch.runtime.job_plan.SLO_SAVE_INTERVAL_SECONDS = float(sys.argv.pop(1))
from tritonwatch.commands.cli import main
sys.exit(main(sys.argv[1:]))
"""
SLO_SAVE_EVERY_S = 2.0


# -- what is measured --------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One reading of the daemon: seconds since it started, RSS, threads, open fds."""

    at: float
    rss_bytes: int
    threads: int
    fds: int

    @property
    def rss_mb(self) -> float:
        return self.rss_bytes / MB


def parse_status(text: str) -> tuple[int, int]:
    """(VmRSS in bytes, Threads) from the text of /proc/PID/status."""
    rss = re.search(r"^VmRSS:\s+(\d+)\s+kB", text, re.MULTILINE)
    threads = re.search(r"^Threads:\s+(\d+)", text, re.MULTILINE)
    if rss is None or threads is None:
        raise ValueError("no VmRSS/Threads in /proc/PID/status (a zombie?)")
    return int(rss.group(1)) * 1024, int(threads.group(1))


def read_sample(pid: int, started: float, proc: Path = Path("/proc")) -> Sample:
    """Reads the process now; OSError once it is gone."""
    rss, threads = parse_status((proc / str(pid) / "status").read_text())
    fds = sum(1 for _ in (proc / str(pid) / "fd").iterdir())
    return Sample(time.monotonic() - started, rss, threads, fds)


@dataclass(frozen=True)
class Growth:
    """What changed after the warm-up, against the goal."""

    baseline: Sample
    """The last sample of the warm-up."""
    after: int
    """How many samples came after it."""
    rss_growth_mb: float
    rss_end_mb: float
    """The last sample minus the baseline (the maximum can be one noisy sample)."""
    rss_slope_mb_per_hour: float
    thread_growth: int
    fd_growth: int
    rss_goal_mb: float = RSS_GOAL_MB
    jitter: int = COUNT_JITTER

    def failures(self) -> list[str]:
        """Each goal missed, in words; empty when all are met."""
        missed = []
        if self.rss_growth_mb > self.rss_goal_mb:
            missed.append(f"RSS grew {self.rss_growth_mb:.1f} MB (> {self.rss_goal_mb:g} MB)")
        if self.thread_growth > self.jitter:
            missed.append(f"threads grew by {self.thread_growth} (> +{self.jitter})")
        if self.fd_growth > self.jitter:
            missed.append(f"open files grew by {self.fd_growth} (> +{self.jitter})")
        return missed

    @property
    def passed(self) -> bool:
        return not self.failures()


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys over xs (0 with fewer than two distinct xs)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


def analyse(
    samples: Sequence[Sample],
    warm_up: float,
    rss_goal_mb: float = RSS_GOAL_MB,
    jitter: int = COUNT_JITTER,
) -> Growth:
    """Growth after ``warm_up`` seconds: the maxima after it minus the last sample of it.

    Raises:
        ValueError: no sample in the warm-up or none after it.
    """
    before = [s for s in samples if s.at <= warm_up]
    after = [s for s in samples if s.at > warm_up]
    if not before or not after:
        raise ValueError("need samples both in the warm-up and after it")
    baseline = before[-1]
    hours = [s.at / 3600 for s in after]
    return Growth(
        baseline=baseline,
        after=len(after),
        rss_growth_mb=max(s.rss_mb for s in after) - baseline.rss_mb,
        rss_end_mb=after[-1].rss_mb - baseline.rss_mb,
        rss_slope_mb_per_hour=slope(hours, [s.rss_mb for s in after]),
        thread_growth=max(s.threads for s in after) - baseline.threads,
        fd_growth=max(s.fds for s in after) - baseline.fds,
        rss_goal_mb=rss_goal_mb,
        jitter=jitter,
    )


def table(samples: Sequence[Sample], step: float) -> str:
    """A row at least ``step`` seconds after the previous row, and always the last one."""
    rows = ["  time_s   rss_mb  threads  fds"]
    shown: float | None = None
    for index, sample in enumerate(samples):
        if shown is None or sample.at - shown >= step or index == len(samples) - 1:
            rows.append(
                f"{sample.at:8.0f} {sample.rss_mb:8.1f} {sample.threads:8d} {sample.fds:4d}"
            )
            shown = sample.at
    return "\n".join(rows)


def write_csv(samples: Sequence[Sample], path: Path) -> None:
    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["time_s", "rss_mb", "threads", "fds"])
        for s in samples:
            writer.writerow([f"{s.at:.1f}", f"{s.rss_mb:.2f}", s.threads, s.fds])


def report(growth: Growth) -> str:
    verdict = "PASS" if growth.passed else "FAIL: " + "; ".join(growth.failures())
    base = growth.baseline
    return "\n".join(
        [
            f"baseline at {base.at:.0f} s (end of warm-up): {base.rss_mb:.1f} MB RSS, "
            f"{base.threads} threads, {base.fds} open files; {growth.after} samples after",
            f"RSS growth: max {growth.rss_growth_mb:+.2f} MB, at the end "
            f"{growth.rss_end_mb:+.2f} MB, slope {growth.rss_slope_mb_per_hour:+.2f} MB/hour",
            f"thread growth: {growth.thread_growth:+d}; open-file growth: {growth.fd_growth:+d}",
            f"goal: RSS ≤ {growth.rss_goal_mb:g} MB, threads and fds ≤ +{growth.jitter}: {verdict}",
        ]
    )


# -- the system under soak ---------------------------------------------------------------


def soak_config(sim: SimProcess, names: Sequence[str], state_dir: Path, nvml: bool) -> str:
    """Every periodic job on 1–2 s; every other model canaried over gRPC."""
    models = ", ".join(
        f"{{name: {name}, canary: {{protocol: grpc}}}}" if index % 2 else f"{{name: {name}}}"
        for index, name in enumerate(names)
    )
    return (
        f"targets: [{{name: sim, url: '{sim.http_url}', grpc_url: 'grpc://{sim.grpc_url}', "
        f"metrics_url: '{sim.metrics_url}', models: [{models}]}}]\n"
        "canary: {rate: 2/s, timeout: 1s}\n"
        "scrape: {interval: 1s, timeout: 800ms}\n"
        f"nvml: {{enabled: {'true' if nvml else 'false'}, interval: 1s}}\n"
        "advisor: {window: 1m, experiment_window: 30s}\n"
        "alerting: {evaluation_interval: 1s}\n"
        f"state: {{dir: '{state_dir}'}}\n"
    )


@dataclass
class Daemon:
    """``tritonwatch run`` in a child process, its log in a file (a pipe nobody reads
    for 30 minutes would fill up and stall it)."""

    process: subprocess.Popen[bytes]
    log: Path
    url: str = ""

    @classmethod
    def start(cls, config: Path, log: Path, nvml: bool) -> Daemon:
        run = ["run", "--config", str(config), "--listen", "127.0.0.1:0", "--log-format", "json"]
        if nvml:
            probe = fixtures_dir() / "nvml" / "h200_probe.json"
            command = [sys.executable, "-c", _DAEMON_WITH_FAKE_NVML, str(probe), str(GPUS)]
            command += [str(SLO_SAVE_EVERY_S), *run]
        else:
            command = [TRITONWATCH, *run]
        with log.open("wb") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        daemon = cls(process, log)
        try:
            daemon.url = wait_until(daemon._listening, timeout=60, what="the daemon's exporter")
        except BaseException:
            daemon.stop()
            raise
        return daemon

    def _listening(self) -> str | None:
        if self.process.poll() is not None:
            raise RuntimeError(f"the daemon exited with {self.process.returncode}: {self.tail()}")
        for line in self.text().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and record.get("event") == "exporter_listening":
                    return str(record["url"])
        return None

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


@dataclass
class MetricsScraper:
    """GETs the daemon's /metrics every ``interval`` seconds on a thread, as Prometheus
    would, and keeps the last body and the counts."""

    url: str
    interval: float = 2.0
    ok: int = 0
    failed: int = 0
    last: str = ""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> MetricsScraper:
        self._thread = threading.Thread(target=self._run, name="soak-scraper", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    self.last = response.read().decode()
                self.ok += 1
            except OSError:
                self.failed += 1
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


def canary_outcomes(metrics: str) -> dict[str, float]:
    """``tritonwatch_canary_requests_total`` summed by outcome."""
    totals: dict[str, float] = {}
    pattern = re.compile(r"^tritonwatch_canary_requests_total\{([^}]*)\} (\S+)$", re.MULTILINE)
    for labels, value in pattern.findall(metrics):
        outcome = re.search(r'outcome="([^"]*)"', labels)
        key = outcome.group(1) if outcome else "?"
        totals[key] = totals.get(key, 0.0) + float(value)
    return totals


@dataclass
class SoakResult:
    samples: list[Sample]
    growth: Growth
    scrapes_ok: int
    scrapes_failed: int
    canary: dict[str, float]
    daemon_exit: int | None
    """None while it was still running at the end (as it should be)."""


def run_soak(
    duration: float,
    warm_up: float,
    sample_interval: float,
    *,
    models: int = MODELS,
    nvml: bool = True,
    reload_every: float = 0.0,
    on_sample: Callable[[Sample], None] | None = None,
) -> SoakResult:
    """Runs the simulator and the daemon for ``duration`` seconds (warm-up included)
    and samples the daemon every ``sample_interval`` seconds."""
    sets = model_set(models)
    names = [model.name for model in sets.models]
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp, SimProcess(models=sets) as sim:
        folder = Path(tmp)
        config = folder / "soak.yaml"
        config.write_text(soak_config(sim, names, folder / "state", nvml))
        daemon = Daemon.start(config, folder / "daemon.log", nvml)
        scraper = MetricsScraper(f"{daemon.url}/metrics").start()
        started = time.monotonic()
        samples: list[Sample] = []
        next_reload = reload_every if reload_every > 0 else float("inf")
        exit_code: int | None = None
        try:
            while True:
                if daemon.process.poll() is not None:
                    exit_code = daemon.process.returncode
                    break
                sample = read_sample(daemon.process.pid, started)
                samples.append(sample)
                if on_sample is not None:
                    on_sample(sample)
                if sample.at >= duration:
                    break
                if sample.at >= next_reload:
                    daemon.process.send_signal(signal.SIGHUP)
                    next_reload += reload_every
                wake = started + len(samples) * sample_interval
                time.sleep(max(0.0, min(wake, started + duration) - time.monotonic()))
        finally:
            scraper.stop()
            if exit_code is None:
                daemon.stop()
        if exit_code is not None:
            raise RuntimeError(f"the daemon exited with {exit_code}: {daemon.tail()}")
        return SoakResult(
            samples,
            analyse(samples, warm_up),
            scraper.ok,
            scraper.failed,
            canary_outcomes(scraper.last),
            exit_code,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=parse_duration, default=1800.0, help="e.g. 30m")
    parser.add_argument("--warm-up", "--warmup", type=parse_duration, default=120.0)
    parser.add_argument("--sample-interval", type=parse_duration, default=10.0)
    parser.add_argument("--table-step", type=parse_duration, default=60.0)
    parser.add_argument("--models", type=int, default=MODELS)
    parser.add_argument("--nvml", choices=["fake", "none"], default="fake")
    parser.add_argument("--reload-every", type=parse_duration, default=0.0,
                        help="also SIGHUP the daemon this often (0: never)")  # fmt: skip
    parser.add_argument("--csv", type=Path, help="write every sample here")
    args = parser.parse_args()
    if args.duration <= args.warm_up:
        parser.error("--duration must be longer than --warm-up")
    print(
        f"soak: {args.models} models, {args.duration:g} s ({args.warm_up:g} s warm-up), "
        f"a sample every {args.sample_interval:g} s, NVML {args.nvml}"
    )
    result = run_soak(
        args.duration,
        args.warm_up,
        args.sample_interval,
        models=args.models,
        nvml=args.nvml == "fake",
        reload_every=args.reload_every,
    )
    print(table(result.samples, args.table_step))
    print(report(result.growth))
    outcomes = ", ".join(f"{k} {v:.0f}" for k, v in sorted(result.canary.items()))
    print(f"/metrics scrapes: {result.scrapes_ok} ok, {result.scrapes_failed} failed; "
          f"canary requests: {outcomes}")  # fmt: skip
    if args.csv:
        write_csv(result.samples, args.csv)
        print(f"samples written to {args.csv}")
    sys.exit(0 if result.growth.passed else 1)


if __name__ == "__main__":
    main()
