"""Scrape of our /metrics: the daemon's exporter against prometheus_client's make_wsgi_app.

The registry is the daemon's own after it watched the footprint's simulator target
(20 models, ten ``simple`` and ten ``resnet50``) for ``--warm-up`` seconds at default
intervals: canary histograms and quantiles, Triton series, SLO burn rates, about 1 900
series and 210 KB. The daemon's jobs and canaries are then stopped so they spend no CPU
in this process; its collectors still answer from what they hold, so every scrape
still runs every ``collect()``.

Two exporters serve that one registry on loopback: ours (``exporter_app``, the one the
daemon runs) and the anchor, ``prometheus_client.make_wsgi_app`` behind the same
threaded WSGI server. A client in a child process scrapes each in turn as Prometheus
3.x does (its ``Accept`` header, preferring OpenMetrics, and ``Accept-Encoding: gzip``),
``--scrapes`` times a round; this process's CPU time over a round (the server threads:
nothing else runs here meanwhile) divided by the scrapes is the CPU of one scrape, so
it counts collect(), rendering, gzip and the HTTP server alike. Rounds alternate
between the two exporters so both see the same machine load.

    python benchmarks/metrics_exposition.py [--warm-up 40] [--scrapes 100] [--repeats 5]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from footprint import daemon_config, model_set
from prometheus_client import CollectorRegistry, make_wsgi_app

from sim_process import SimProcess
from tritonwatch.common.listen import ListenAddress
from tritonwatch.config import load_config
from tritonwatch.export.http_server import ExporterServer, HealthReport, exporter_app
from tritonwatch.runtime.daemon import Daemon

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
"""What Prometheus 3.x sends with every scrape (``scrape_protocols`` at its default)."""

_CLIENT = """
import http.client, sys
host, port, path, accept = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[5]
count = int(sys.argv[4])
sizes = set()
for _ in range(count):
    connection = http.client.HTTPConnection(host, port, timeout=30)
    connection.request("GET", path, headers={"Accept": accept, "Accept-Encoding": "gzip"})
    response = connection.getresponse()
    assert response.status == 200, response.status
    sizes.add(len(response.read()))
    connection.close()
print(max(sizes))
"""


@dataclass(frozen=True)
class ExpositionResult:
    """Per round, CPU seconds per scrape of each exporter (paired), and the registry's size."""

    series: int
    body_bytes: int
    ours_gzip_bytes: int
    anchor_gzip_bytes: int
    ours_seconds: list[float]
    anchor_seconds: list[float]


@contextlib.contextmanager
def daemon_registry(warm_up: float) -> Iterator[CollectorRegistry]:
    """The daemon's registry after ``warm_up`` seconds on the footprint's simulator
    target, with the daemon's jobs and canaries stopped but its state kept."""
    sets = model_set()
    with SimProcess(models=sets) as sim, tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tritonwatch.yaml"
        path.write_text(daemon_config(sim.http_url, sim.metrics_url, [m.name for m in sets.models]))
        daemon = Daemon(path, load_config(path), listen_override="127.0.0.1:0")
        daemon.start()
        try:
            time.sleep(warm_up)
            # Quiesce without Daemon.stop(), which also drops the targets' series.
            daemon._scheduler.shutdown(wait=True)
            daemon._canaries.stop()
            daemon.evaluator.stop()
            yield daemon.registry
        finally:
            daemon.stop()


def _round(server: ExporterServer, scrapes: int) -> tuple[float, int]:
    """(CPU seconds of this process per scrape, gzip body bytes) over ``scrapes`` scrapes."""
    address = server.address
    before = time.process_time()
    client = subprocess.run(
        [sys.executable, "-c", _CLIENT, address.host, str(address.port), "/metrics",
         str(scrapes), PROMETHEUS_ACCEPT],
        check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    return (time.process_time() - before) / scrapes, int(client.stdout)


def _servers(registry: CollectorRegistry) -> Iterable[ExporterServer]:
    healthy = lambda: HealthReport(True)  # noqa: E731
    anchor = make_wsgi_app(registry)
    for app in (exporter_app(registry, healthy), anchor):
        server = ExporterServer(ListenAddress("127.0.0.1", 0), app)
        server.start()
        yield server


def measure(warm_up: float = 40.0, scrapes: int = 100, repeats: int = 5) -> ExpositionResult:
    """Builds the daemon's registry, then alternates rounds of scrapes of both exporters."""
    from prometheus_client import generate_latest  # noqa: PLC0415

    with daemon_registry(warm_up) as registry:
        body = generate_latest(registry)
        ours, anchor = list(_servers(registry))
        try:
            _round(ours, 2), _round(anchor, 2)  # first scrapes fill caches on both sides
            ours_seconds, anchor_seconds = [], []
            sizes = (0, 0)
            for _ in range(repeats):
                ours_cpu, ours_size = _round(ours, scrapes)
                anchor_cpu, anchor_size = _round(anchor, scrapes)
                ours_seconds.append(ours_cpu)
                anchor_seconds.append(anchor_cpu)
                sizes = (ours_size, anchor_size)
        finally:
            ours.stop()
            anchor.stop()
    series = sum(1 for line in body.splitlines() if not line.startswith(b"#"))
    return ExpositionResult(series, len(body), *sizes, ours_seconds, anchor_seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-up", type=float, default=40.0)
    parser.add_argument("--scrapes", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    result = measure(args.warm_up, args.scrapes, args.repeats)
    ours = statistics.median(result.ours_seconds)
    anchor = statistics.median(result.anchor_seconds)
    pairs = zip(result.ours_seconds, result.anchor_seconds, strict=True)
    ratio = statistics.median(ours / anchor for ours, anchor in pairs)
    print(f"registry: {result.series} series, {result.body_bytes / 1024:.0f} KiB as text 0.0.4")
    print(f"gzip body: ours {result.ours_gzip_bytes} B, make_wsgi_app {result.anchor_gzip_bytes} B")
    print(f"make_wsgi_app   {anchor * 1e3:7.2f} ms CPU per scrape (median of {args.repeats})")
    print(f"tritonwatch     {ours * 1e3:7.2f} ms CPU per scrape (median of {args.repeats})")
    print(f"ratio ours / make_wsgi_app {ratio:.3f}  (goal ≤ 0.33)")


if __name__ == "__main__":
    main()
