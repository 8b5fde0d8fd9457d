"""Scale: one daemon watching every model of one server with N models (issue 39, item 5).

For each N in :data:`SIZES` the many-model server (``benchmarks/many_models.py``, its
own process: N identity models, KServe v2 HTTP and a Triton-style ``/metrics``) starts,
and ``tritonwatch run`` (a subprocess) watches it with a config that names the target
and no models: model discovery finds them all through the repository index. Every
interval is the default; the one departure is ``discovery.max_models_per_target``,
raised to N where the default cap is below it, so that every model is watched (a
capped daemon would measure a hundred models, not N; the table says so).

Per N:

1. Until every model has had a canary success (the daemon's own
   ``tritonwatch_canary_requests_total{outcome="success"}``, read every 5 s, or every
   five fetch times when a fetch takes longer than a second) or
   ``success_limit`` seconds: the time from the daemon's start is the table's
   "every model watched".
2. Warm-up to ``warm_up`` seconds after the start, and at least :data:`SETTLE_S` after
   every model succeeded: the start-up reads (discovery, the canaries' metadata and
   configs) are over before the window.
3. A window of ``window`` seconds: the daemon's and the server's CPU and RSS from
   /proc every 2 s (``harness.footprint``, as the footprint benchmark reads them); the
   daemon's ``/metrics`` fetched every 15 s as Prometheus would (plain text, no gzip:
   its series, its bytes, the time to fetch it); the server's calls by kind, counted by
   the server, per minute over the window.

    python benchmarks/scale.py [--sizes 20,200,1000] [--window 60] [--warm-up 45]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from harness import Footprint, Goal, ProcSample, Row, Table, footprint, read_proc

from support import DaemonProcess, wait_until
from tritonwatch.config.schema import DiscoveryConfig

HERE = Path(__file__).resolve().parent
SIZES = (20, 200, 1000)
GOAL_SIZE = 1000
"""The N the issue's goals are set at."""
MODEL_API = ("stats", "config", "metadata", "index", "server")
"""The server's calls counted as its model API: statistics, config, model metadata, the
repository index and the server's own metadata (``GET /v2``)."""
DEFAULT_CAP = DiscoveryConfig().max_models_per_target
SCRAPE_EVERY_S = 15.0
SAMPLE_EVERY_S = 2.0
POLL_EVERY_S = 5.0
SETTLE_S = 15.0
PLAN = {20: (60.0, 45.0, 60.0), 200: (120.0, 45.0, 60.0), 1000: (300.0, 60.0, 120.0)}
"""N → (success limit, warm-up, window) in seconds for the full run: about 8 minutes."""
QUICK_PLAN = {20: (45.0, 20.0, 30.0), 200: (60.0, 20.0, 30.0)}
SUCCESS_GOAL_S = 180.0
""""A canary success each within a few minutes": three."""
_CANARY_LINE = re.compile(r"^tritonwatch_canary_requests_total\{([^}]*)\} (\S+)$", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
MIB = 2**20


@dataclass(frozen=True)
class Scrape:
    """One fetch of the daemon's ``/metrics``."""

    seconds: float
    body: str

    @property
    def series(self) -> int:
        return series_count(self.body)


@dataclass
class ScaleRun:
    """What one N measured."""

    models: int
    daemon: Footprint
    server: Footprint
    scrapes: list[Scrape]
    """The window's fetches of the daemon's ``/metrics`` that answered."""
    final: Scrape
    """The fetch right after the window: its series and bytes are the table's."""
    failed_fetches: int
    calls_per_minute: dict[str, float]
    succeeded: int
    """Models with at least one canary success by the end of the window."""
    all_succeeded_s: float | None
    """Seconds from the daemon's start until every model had a success; None: not by
    the end of the window."""
    observed_s: float
    """Seconds from the daemon's start to the end of the window."""
    warnings: dict[str, int] = field(default_factory=dict)
    """The daemon's warning and error log events by name, over the whole run."""

    @property
    def model_api_per_minute(self) -> float:
        return sum(self.calls_per_minute.get(kind, 0.0) for kind in MODEL_API)


def canary_successes(metrics: str) -> dict[str, float]:
    """Successful canary requests per model, from the daemon's ``/metrics`` text."""
    found: dict[str, float] = {}
    for labels, value in _CANARY_LINE.findall(metrics):
        named = dict(_LABEL.findall(labels))
        if named.get("outcome") == "success":
            model = named.get("model", "")
            found[model] = found.get(model, 0.0) + float(value)
    return found


def series_count(metrics: str) -> int:
    """Samples on a Prometheus text page: its lines that are neither comments nor empty."""
    return sum(1 for line in metrics.splitlines() if line and not line.startswith("#"))


def daemon_config(http_url: str, metrics_url: str, count: int) -> str:
    """One target, no ``models:`` (discover them all), the discovery cap at least
    ``count``; everything else the defaults."""
    text = f"targets: [{{name: many, url: '{http_url}', metrics_url: '{metrics_url}'}}]\n"
    if count > DEFAULT_CAP:
        text += f"discovery: {{max_models_per_target: {count}}}\n"
    return text


@dataclass(frozen=True)
class ServerProcess:
    process: subprocess.Popen[bytes]
    http_url: str
    metrics_url: str

    def counts(self) -> dict[str, int]:
        with urllib.request.urlopen(f"{self.http_url}/bench/counts", timeout=10) as answer:
            counts: dict[str, int] = json.loads(answer.read())
        return counts


@contextlib.contextmanager
def many_model_server(count: int, tmp: Path) -> Iterator[ServerProcess]:
    """``benchmarks/many_models.py --models count`` in its own process, until the block ends."""
    ports_file = tmp / "ports.json"
    process = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "many_models.py"),
            "--models",
            str(count),
            "--ports-file",
            str(ports_file),
        ],
        stdout=subprocess.DEVNULL,
    )
    try:

        def listening() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"many_models.py exited with {process.returncode}")
            return ports_file.exists()

        wait_until(listening, timeout=60, what="the many-model server", every=0.1)
        ports = json.loads(ports_file.read_text())
        yield ServerProcess(
            process,
            f"http://127.0.0.1:{ports['http']}",
            f"http://127.0.0.1:{ports['metrics']}/metrics",
        )
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def fetch(url: str) -> Scrape:
    """GET the daemon's ``/metrics`` as plain text; the time is to the body's last byte."""
    request = urllib.request.Request(url, headers={"Accept": "text/plain"})
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=30) as answer:
        body = answer.read().decode()
    return Scrape(time.monotonic() - started, body)


def _warnings(daemon: DaemonProcess) -> dict[str, int]:
    counted: dict[str, int] = {}
    for event in list(daemon.events):
        if event.get("level") in {"warning", "error", "critical"}:
            name = str(event.get("event"))
            counted[name] = counted.get(name, 0) + 1
    return counted


def _all_succeeded(scrape: Scrape, count: int) -> bool:
    return len(canary_successes(scrape.body)) >= count


@dataclass
class _Window:
    """What the measuring window collects."""

    samples: dict[str, list[ProcSample]]
    scrapes: list[Scrape] = field(default_factory=list)
    failed_fetches: int = 0


def _measure_window(
    pids: dict[str, int], metrics_url: str, window: float, on_scrape: Callable[[Scrape], None]
) -> _Window:
    """/proc every :data:`SAMPLE_EVERY_S`, ``/metrics`` every :data:`SCRAPE_EVERY_S`,
    for ``window`` seconds."""
    collected = _Window({name: [] for name in pids})
    end = time.monotonic() + window
    next_scrape = time.monotonic()
    while True:
        now = time.monotonic()
        if next_scrape <= now < end:
            next_scrape += SCRAPE_EVERY_S
            try:
                collected.scrapes.append(fetch(metrics_url))
            except OSError:  # a timeout or a refusal: counted, and the window goes on
                collected.failed_fetches += 1
            else:
                on_scrape(collected.scrapes[-1])
        for name, pid in pids.items():
            collected.samples[name].append(read_proc(pid))
        if time.monotonic() >= end:
            return collected
        time.sleep(min(SAMPLE_EVERY_S, max(0.0, end - time.monotonic())))


def measure_one(count: int, success_limit: float, warm_up: float, window: float) -> ScaleRun:
    """One daemon against one server of ``count`` models; see the module doc."""
    with tempfile.TemporaryDirectory() as tmp, many_model_server(count, Path(tmp)) as server:
        config = Path(tmp) / "scale.yaml"
        config.write_text(daemon_config(server.http_url, server.metrics_url, count))
        started = time.monotonic()
        daemon = DaemonProcess(config)
        try:
            metrics_url = f"{daemon.url}/metrics"
            succeeded: list[float] = []  # the seconds to every model's success, once known

            def note_success(scrape: Scrape) -> None:
                if not succeeded and _all_succeeded(scrape, count):
                    succeeded.append(time.monotonic() - started)

            while not succeeded and time.monotonic() - started < success_limit:
                asked = time.monotonic()
                with contextlib.suppress(OSError):  # not answering yet: not succeeded yet
                    note_success(fetch(metrics_url))
                if not succeeded:  # a page that takes long to fetch is asked for less often
                    time.sleep(max(POLL_EVERY_S, 5 * (time.monotonic() - asked)))
            settled = started + warm_up
            if succeeded:
                settled = max(settled, started + succeeded[0] + SETTLE_S)
            time.sleep(max(0.0, settled - time.monotonic()))
            pids = {"daemon": daemon.process.pid, "server": server.process.pid}
            before = server.counts()
            window_start = time.monotonic()
            collected = _measure_window(pids, metrics_url, window, note_success)
            after = server.counts()
            minutes = (time.monotonic() - window_start) / 60.0
            final = fetch(metrics_url)
            return ScaleRun(
                models=count,
                daemon=footprint(collected.samples["daemon"]),
                server=footprint(collected.samples["server"]),
                scrapes=collected.scrapes,
                final=final,
                failed_fetches=collected.failed_fetches,
                calls_per_minute={k: (after[k] - before.get(k, 0)) / minutes for k in after},
                succeeded=sum(1 for v in canary_successes(final.body).values() if v > 0),
                all_succeeded_s=succeeded[0] if succeeded else None,
                observed_s=time.monotonic() - started,
                warnings=_warnings(daemon),
            )
        finally:
            with contextlib.suppress(Exception):
                daemon.stop(timeout=30)


def measure(plan: dict[int, tuple[float, float, float]]) -> dict[int, ScaleRun | str]:
    """Every N of ``plan`` in turn; a size that fails is its error's text, and the
    others still run."""
    runs: dict[int, ScaleRun | str] = {}
    for count, (limit, warm_up, window) in plan.items():
        print(f"scale: N = {count} ...", flush=True)
        try:
            runs[count] = measure_one(count, limit, warm_up, window)
        except Exception as error:  # reported in the table; the other sizes still run
            runs[count] = f"{type(error).__name__}: {error}"
    return runs


# --- the table ------------------------------------------------------------------------


def _value(run: ScaleRun | str | None, figure: str) -> float:
    """One figure of a run, NaN when the run failed or has none."""
    if not isinstance(run, ScaleRun):
        return math.nan
    values = {
        "succeeded": 100.0 * run.succeeded / run.models,
        "all_succeeded": run.observed_s if run.all_succeeded_s is None else run.all_succeeded_s,
        "cpu": run.daemon.cpu_percent,
        "rss": run.daemon.rss_median / MIB,
        "series": run.final.series / run.models,
        "bytes": len(run.final.body.encode()) / run.models / 1024,
        "api": run.model_api_per_minute,
        "infer": run.calls_per_minute.get("infer", math.nan),
    }
    return values[figure]


ROWS = (
    ("succeeded", "models with a canary success", "%", Goal(">=", 100.0, on="ours", unit="%")),
    (
        "all_succeeded",
        "time until every model had a canary success",
        "s",
        Goal("<=", SUCCESS_GOAL_S, on="ours", unit="s"),
    ),
    ("cpu", "daemon CPU, % of one core", "%", Goal("<=", 20.0, on="ours", unit="%")),
    ("rss", "daemon RSS, median", "MiB", None),
    ("series", "daemon /metrics series per model", "", Goal("<=", 40.0, on="ours")),
    ("bytes", "daemon /metrics bytes per model", "KiB", Goal("<=", 4.0, on="ours", unit="KiB")),
    ("fetch", "daemon /metrics fetch time", "s", Goal("<=", 1.0, on="ours", unit="s")),
    (
        "api",
        "model-API calls per minute (statistics, config, metadata, index, `GET /v2`)",
        "/min",
        Goal("<=", 30.0, on="ours", unit="/min"),
    ),
    ("infer", "canary requests per minute (the server's count)", "/min", None),
)
"""(figure, label, unit, the issue's goal at N = 1 000)."""


def _row(runs: dict[int, ScaleRun | str], count: int, figure: str) -> Row:
    run, anchor = runs.get(count), runs.get(SIZES[0])
    _, label, unit, goal = next(row for row in ROWS if row[0] == figure)
    if figure == "fetch":
        ours = [s.seconds for s in run.scrapes] if isinstance(run, ScaleRun) else [math.nan]
        base = [s.seconds for s in anchor.scrapes] if isinstance(anchor, ScaleRun) else []
    else:
        ours, base = [_value(run, figure)], [_value(anchor, figure)]
    note = ""
    if figure == "api" and isinstance(run, ScaleRun):
        note = ", ".join(f"{k} {run.calls_per_minute.get(k, 0):.0f}" for k in MODEL_API)
    if figure == "all_succeeded" and isinstance(run, ScaleRun) and run.all_succeeded_s is None:
        note = f"not reached: {run.succeeded} of {count} by the end; the figure is a lower bound"
    return Row(
        f"N = {count}: {label}",
        ours,
        base,
        unit=unit,
        goal=goal if count == GOAL_SIZE else None,
        note=note,
    )


def growth_row(runs: dict[int, ScaleRun | str]) -> Row:
    """RSS growth per model past the first hundred: from N = 200 to N = 1 000."""
    low, high = runs.get(200), runs.get(GOAL_SIZE)
    value = math.nan
    if isinstance(low, ScaleRun) and isinstance(high, ScaleRun):
        value = (high.daemon.rss_median - low.daemon.rss_median) / (GOAL_SIZE - 200) / MIB
    return Row(
        "RSS growth per model past the first 100 (N = 200 → 1 000)",
        [value],
        unit="MiB",
        goal=Goal("<=", 0.1, on="ours", unit="MiB"),
    )


def scale_table(
    runs: dict[int, ScaleRun | str], plan: dict[int, tuple[float, float, float]]
) -> Table:
    table = Table(
        "scale",
        "10. Scale: one daemon, one server with N models, default intervals",
        "at N",
        f"N = {SIZES[0]}, same run",
    )
    larger = [count for count in plan if count != SIZES[0]] or list(plan)
    for figure, *_ in ROWS:
        table.rows += [_row(runs, count, figure) for count in larger]
        if figure == "rss" and GOAL_SIZE in plan:
            table.rows.append(growth_row(runs))
    table.notes += _notes(runs, plan)
    return table


def _notes(
    runs: dict[int, ScaleRun | str], plan: dict[int, tuple[float, float, float]]
) -> list[str]:
    notes = [
        "Server: `benchmarks/many_models.py` in its own process, N identity models "
        "(`m0000` …, FP32 [-1, 16], max batch 8; metadata and config as Triton 2.51 answers "
        "them for `tests/triton_models/batching`), KServe v2 over HTTP/1.1 keep-alive on one "
        "asyncio loop, Triton 24.07+'s per-model `/metrics` families, counters that grow "
        "with each inference; it counts every call by kind. The simulator is not used: "
        "its per-model batchers and simulated GPUs would put the server's cost, and the "
        "product's own code, on the other side of the measurement.",
        f"Daemon: `tritonwatch run`, one target, no `models:` (discovery through the "
        f"repository index), default intervals and rates (canary 1/s per model scaled to "
        f"`canary.max_total_rate`); `discovery.max_models_per_target` raised to N where "
        f"the default ({DEFAULT_CAP}) is below it: with the default cap the daemon watches "
        f"{DEFAULT_CAP} of 1 000.",
        "Per N: success polled every 5 s (every five fetch times where a fetch takes "
        "longer than a second) from the daemon's own "
        '`tritonwatch_canary_requests_total{outcome="success"}`, then a warm-up, then a '
        "window: CPU and RSS from /proc every 2 s; the daemon's `/metrics` fetched every "
        "15 s as plain text (series = sample lines; bytes and series over N; the fetch "
        "row is every fetch of the window, median [min–max]); calls per minute from the "
        "server's counters over the window. Goals (issue 39) judged at N = 1 000; "
        f'"within a few minutes" read as ≤ {SUCCESS_GOAL_S:g} s.',
    ]
    for count, (limit, warm_up, _window) in plan.items():
        run = runs.get(count)
        if not isinstance(run, ScaleRun):
            notes.append(f"N = {count}: **failed**: `{run}`")
            continue
        calls = ", ".join(f"{k} {v:.1f}" for k, v in run.calls_per_minute.items() if v)
        warned = ", ".join(f"{k} ×{v}" for k, v in sorted(run.warnings.items())) or "none"
        notes.append(
            f"N = {count}: window {run.daemon.seconds:.0f} s after a warm-up of at least "
            f"{warm_up:g} s (success limit {limit:g} s); {run.succeeded} of {count} models "
            f"succeeded; daemon RSS max {run.daemon.rss_max / MIB:.1f} MiB; /metrics "
            f"{run.final.series} series, {len(run.final.body.encode()) / 1024:.0f} KiB "
            f"({len(run.scrapes)} fetches in the window, {run.failed_fetches} failed); calls "
            f"per minute: {calls}; the server's own CPU {run.server.cpu_percent:.1f} % and "
            f"RSS {run.server.rss_median / MIB:.0f} MiB; the daemon's warnings: {warned}."
        )
    return notes


def table(quick: bool) -> Table:
    """``make bench``'s section ``scale``: every size of the plan, one table."""
    plan = QUICK_PLAN if quick else PLAN
    return scale_table(measure(plan), plan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--success-limit", type=float, help="seconds (default: per size)")
    parser.add_argument("--warm-up", type=float, help="seconds (default: per size)")
    parser.add_argument("--window", type=float, help="seconds (default: per size)")
    args = parser.parse_args()
    plan = {}
    for count in (int(size) for size in args.sizes.split(",")):
        limit, warm_up, window = PLAN.get(count, PLAN[GOAL_SIZE])
        plan[count] = (args.success_limit or limit, args.warm_up or warm_up, args.window or window)
    from harness import render_table  # noqa: PLC0415

    print(render_table(scale_table(measure(plan), plan)))


if __name__ == "__main__":
    main()
