"""Footprint: the daemon's RSS and CPU against prometheus-node-exporter's, side by side.

One target with 20 models on the simulator (ten ``simple``, ten ``resnet50``), the
real daemon (``tritonwatch run``) with nothing configured but the target, its models
and ``metrics_url`` — so default intervals: a canary at 1/s per model, a scrape every
15 s, SLO evaluation every 15 s. Beside it Debian's ``prometheus-node-exporter`` on a
loopback port, the usual "small always-on exporter" a host runs. Both run at the same
time for ``--duration`` (so they share the machine's load) and both are scraped every
15 s like Prometheus would, because answering scrapes is part of an exporter's cost.

Every ``--sample-every`` seconds /proc/PID/status (VmRSS) and /proc/PID/stat
(utime + stime) are read for each; CPU% is the CPU time used between the first and
the last sample after ``--warm-up`` (start-up imports excluded) over the wall time,
in percent of one core; RSS is the median and the maximum of the samples. The
daemon does real work the exporter does not (20 canaries, Triton scrapes, SLOs), so
the ratio says what that work costs, not which program is leaner per se.

``--target triton`` does the same against a real ``tritonserver`` 2.51 (the one
``make test`` installs in ``.triton``) serving 20 copies of ``tests/triton_models/batching``
(the 2 ms model, one CPU instance each: 20 Python-backend stub processes, about 1 GiB
between them) under the names ``batching_00`` … ``batching_19``. The simulator
(``--target sim``, the default) answers faster and costs less to start; the real server
is the one whose /metrics, statistics and config the daemon parses in production.
``--rss-after-import`` also reports what ``import tritonwatch.commands.cli`` alone costs.

``--streams N`` (simulator only) adds N vLLM-flavoured LLM models (``llm_00`` …,
decoupled, continuous batching at the simulator's default costs: about 8 ms a token)
beside the 20 plain ones. The daemon finds them decoupled and streams from each at the
same default 1/s with the default ``canary.stream`` (32-word prompts, 16 tokens): each
stream is a read per token on the canary engine's thread, TTFT and 15 gaps timed, three
more histograms and a quantile window per model. Run once with and once without to see
what the streaming canaries cost (``PYTHONPATH`` at another checkout's ``src`` measures its
code the same way: the daemon runs from it).

    python benchmarks/footprint.py [--target sim|triton] [--duration 300] [--quick]
                                   [--streams 5]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from harness import Footprint, ProcSample, footprint, read_proc, rss_bytes

from real_triton import MODELS as TRITON_MODELS
from real_triton import RealTriton
from sim_process import SimProcess
from support import DaemonProcess, free_port, wait_until
from tritonwatch.sim.builtin import BUILTIN_MODEL_SET
from tritonwatch.sim.models import ModelSet, parse_model_set

NODE_EXPORTER = "prometheus-node-exporter"
SCRAPE_INTERVAL_S = 15.0
MODELS = 20
GPUS = 4
STREAMS = 5
"""LLM models (streaming canaries) of the ``--streams`` variant, beside the 20 plain ones."""
LLM_MODEL = {"max_batch_size": 0, "llm": {"backend": "vllm"}}
"""A vLLM-flavoured decoupled model at the simulator's default LLM costs."""
TRITON_MODEL = "batching"
"""The real-Triton mode's model: FP32 [16], 2 ms + 0.2 ms per row (the "2–5 ms model")."""


def model_set(count: int = MODELS, streams: int = 0) -> ModelSet:
    """``count`` models alternating between the built-in ``simple`` and ``resnet50``,
    then ``streams`` LLM models ``llm_NN``, spread over four simulated GPUs."""
    builtin = {model["name"]: model for model in BUILTIN_MODEL_SET["models"]}
    models: list[dict[str, Any]] = []
    for index in range(count):
        base = "simple" if index % 2 == 0 else "resnet50"
        model = copy.deepcopy(builtin[base])
        model["name"] = f"{base}_{index:02d}"
        model["instance_group"] = {**model["instance_group"], "gpus": [index % GPUS]}
        models.append(model)
    for index in range(streams):
        group = {"count": 1, "kind": "KIND_GPU", "gpus": [(count + index) % GPUS]}
        models.append(
            {**copy.deepcopy(LLM_MODEL), "name": f"llm_{index:02d}", "instance_group": group}
        )
    gpus = [{"uuid": f"GPU-51a7c0de-0000-4000-8000-0000000000{i:02x}"} for i in range(GPUS)]
    return parse_model_set({"gpus": gpus, "models": models}, source="<footprint>")


def triton_repository(root: Path, count: int = MODELS) -> list[str]:
    """``count`` copies of the batching model under ``root``, named ``batching_NN``.

    Each copy gets its own ``1/model.py`` (the test models link theirs to
    ``../../identity.py``, which a copy elsewhere would not find) and keeps the config
    file as it is: it names no model, so the directory name is the model's name.
    """
    source = TRITON_MODELS / TRITON_MODEL
    names = []
    for index in range(count):
        name = f"{TRITON_MODEL}_{index:02d}"
        version = root / name / "1"
        version.mkdir(parents=True)
        shutil.copyfile(source / "config.pbtxt", root / name / "config.pbtxt")
        shutil.copyfile((source / "1" / "model.py").resolve(), version / "model.py")
        names.append(name)
    return names


@contextlib.contextmanager
def target_server(kind: str, tmp: Path, streams: int = 0) -> Iterator[tuple[str, str, list[str]]]:
    """(HTTP URL, metrics URL, model names) of a running simulator or real Triton."""
    if kind == "triton":
        if streams:
            raise ValueError("--streams is a simulator variant: use --target sim")
        names = triton_repository(tmp / "models")
        server = RealTriton(names, repository=tmp / "models", log_path=tmp / "triton.log")
        server.start_timeout_seconds = 180.0  # 20 Python-backend stubs start one by one
        server.start()
        try:
            yield server.http_url, server.metrics_url, names
        finally:
            server.stop()
        return
    sets = model_set(streams=streams)
    with SimProcess(models=sets) as sim:
        yield sim.http_url, sim.metrics_url, [model.name for model in sets.models]


def daemon_config(http_url: str, metrics_url: str, names: list[str]) -> str:
    """The smallest complete config: one target, its models, where its /metrics is."""
    models = ", ".join(f"{{name: {name}}}" for name in names)
    return (
        f"targets: [{{name: sim, url: '{http_url}', metrics_url: '{metrics_url}', "
        f"models: [{models}]}}]\n"
    )


def start_node_exporter(port: int) -> subprocess.Popen[bytes]:
    """Debian's node exporter on a loopback port with its default collectors."""
    process = subprocess.Popen(
        [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/metrics"

    def answers() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"{NODE_EXPORTER} exited with {process.returncode}")
        try:
            return requests.get(url, timeout=2).status_code == 200
        except requests.RequestException:
            return False

    wait_until(answers, timeout=20, what=f"{NODE_EXPORTER} on port {port}", every=0.1)
    return process


class Scraper:
    """GETs each URL every ``interval`` seconds on a thread, as Prometheus would."""

    def __init__(self, urls: dict[str, str], interval: float = SCRAPE_INTERVAL_S) -> None:
        self.urls = urls
        self.interval = interval
        self.scrapes = dict.fromkeys(urls, 0)
        self.failures = dict.fromkeys(urls, 0)
        self.last_bytes = dict.fromkeys(urls, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scraper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with requests.Session() as session:
            while True:
                for name, url in self.urls.items():
                    try:
                        response = session.get(url, timeout=10)
                        response.raise_for_status()
                        self.scrapes[name] += 1
                        self.last_bytes[name] = len(response.content)
                    except requests.RequestException:
                        self.failures[name] += 1
                if self._stop.wait(self.interval):
                    return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


@dataclass(frozen=True)
class FootprintResult:
    daemon: Footprint
    exporter: Footprint
    daemon_scrape_bytes: int
    exporter_scrape_bytes: int
    scrapes: int
    canary_successes: float
    canary_failures: float
    streams: float = 0.0
    """Streams the daemon timed (TTFT observations), all models together."""
    stream_tokens: float = 0.0
    """Output tokens those streams carried."""


def _canary_outcomes(metrics: str) -> tuple[float, float]:
    """(successful, other) canary requests the daemon counted (streams among them)."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    ok = other = 0.0
    for family in text_string_to_metric_families(metrics):
        if family.name == "tritonwatch_canary_requests":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    if sample.labels.get("outcome") == "success":
                        ok += sample.value
                    else:
                        other += sample.value
    return ok, other


def stream_totals(metrics: str) -> tuple[float, float]:
    """(streams timed, output tokens) the daemon's streaming canaries counted."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    totals = {"tritonwatch_canary_time_to_first_token_seconds_count": 0.0,
              "tritonwatch_canary_output_tokens_total": 0.0}  # fmt: skip
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += sample.value
    streams, tokens = totals.values()
    return streams, tokens


def measure(
    duration: float = 300.0,
    warm_up: float = 15.0,
    sample_every: float = 2.0,
    target: str = "sim",
    streams: int = 0,
) -> FootprintResult:
    """Runs both side by side for ``warm_up`` + ``duration`` seconds; see the module doc.

    ``target``: ``sim`` (the simulator, 20 models) or ``triton`` (real tritonserver,
    20 copies of the batching model). ``streams``: LLM models with streaming canaries
    beside them (simulator only)."""
    if shutil.which(NODE_EXPORTER) is None:
        raise RuntimeError(f"{NODE_EXPORTER} is missing: apt-get install {NODE_EXPORTER}")
    with (
        tempfile.TemporaryDirectory() as tmp,
        target_server(target, Path(tmp), streams) as (http_url, metrics_url, names),
    ):
        config = Path(tmp) / "footprint.yaml"
        config.write_text(daemon_config(http_url, metrics_url, names))
        exporter_port = free_port()
        exporter = start_node_exporter(exporter_port)
        daemon: DaemonProcess | None = None
        scraper: Scraper | None = None
        try:
            daemon = DaemonProcess(config)
            scraper = Scraper(
                {
                    "daemon": f"{daemon.url}/metrics",
                    "exporter": f"http://127.0.0.1:{exporter_port}/metrics",
                }
            )
            pids = {"daemon": daemon.process.pid, "exporter": exporter.pid}
            samples: dict[str, list[ProcSample]] = {name: [] for name in pids}
            time.sleep(warm_up)
            end = time.monotonic() + duration
            while True:
                for name, pid in pids.items():
                    samples[name].append(read_proc(pid))
                if time.monotonic() >= end:
                    break
                time.sleep(min(sample_every, max(0.0, end - time.monotonic())))
            text = daemon.metrics()
            ok, bad = _canary_outcomes(text)
            timed, tokens = stream_totals(text)
            return FootprintResult(
                daemon=footprint(samples["daemon"]),
                exporter=footprint(samples["exporter"]),
                daemon_scrape_bytes=scraper.last_bytes["daemon"],
                exporter_scrape_bytes=scraper.last_bytes["exporter"],
                scrapes=min(scraper.scrapes.values()),
                canary_successes=ok,
                canary_failures=bad,
                streams=timed,
                stream_tokens=tokens,
            )
        finally:
            if scraper is not None:
                scraper.stop()
            if daemon is not None:
                with contextlib.suppress(Exception):
                    daemon.stop()
            exporter.terminate()
            exporter.wait(timeout=10)


def rss_after_import(module: str = "tritonwatch.commands.cli") -> int:
    """VmRSS in bytes of a fresh interpreter that has imported ``module`` and nothing
    else: the floor under the daemon's RSS before it has done anything."""
    code = f"import {module}, pathlib; print(pathlib.Path('/proc/self/status').read_text())"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return rss_bytes(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=["sim", "triton"], default="sim")
    parser.add_argument("--duration", type=float, default=300.0, help="measured seconds")
    parser.add_argument("--quick", action="store_true", help="30 s instead of --duration")
    parser.add_argument("--warm-up", type=float, default=15.0)
    parser.add_argument("--sample-every", type=float, default=2.0)
    parser.add_argument(
        "--streams", type=int, default=0, metavar="N",
        help=f"add N LLM models with streaming canaries (sim only; e.g. {STREAMS})",
    )  # fmt: skip
    args = parser.parse_args()
    print(f"RSS after `import tritonwatch.commands.cli`: {rss_after_import() / 2**20:.1f} MiB")
    duration = 30.0 if args.quick else args.duration
    result = measure(duration, args.warm_up, args.sample_every, args.target, args.streams)
    streaming = f" + {args.streams} LLM models with streaming canaries" if args.streams else ""
    print(
        f"{MODELS} models{streaming} on {args.target}, default intervals, "
        f"{result.daemon.seconds:.0f} s measured"
    )
    print("process | CPU % of one core | RSS median MiB | RSS max MiB | /metrics bytes")
    for name, value, size in (
        ("tritonwatch run", result.daemon, result.daemon_scrape_bytes),
        (NODE_EXPORTER, result.exporter, result.exporter_scrape_bytes),
    ):
        print(
            f"{name} | {value.cpu_percent:.2f} | {value.rss_median / 2**20:.1f} | "
            f"{value.rss_max / 2**20:.1f} | {size}"
        )
    print(
        f"canary requests: {result.canary_successes:.0f} succeeded, "
        f"{result.canary_failures:.0f} other; {result.scrapes} scrapes each"
    )
    if args.streams:
        print(f"streams timed: {result.streams:.0f}, {result.stream_tokens:.0f} output tokens")


if __name__ == "__main__":
    main()
