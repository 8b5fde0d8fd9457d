"""Watcher soak: does the daemon stay quiet about healthy servers, restart included?

The promise a monitor makes is two-sided: when it pages, something is wrong; when it is
quiet, it is still looking. This runs the real daemon (``tritonwatch run``) for
``--duration`` (30 minutes by default) against:

* a real tritonserver, canaried over HTTP (``batching``), gRPC (``batching`` again, as a
  second target on the same server) and a stream (``streaming``, decoupled: detected
  and handed to the streaming canary);
* a real MLServer (``echo`` over HTTP);
* a real Alertmanager delivering to a local webhook receiver, with the shipped
  ``inhibit_rules``.

The daemon starts first and tritonserver ``--late-start`` seconds after it (a daemon
and its server coming up together, as on a node reboot): every Triton canary must
succeed within a minute of the server being ready. Halfway through, tritonserver is
SIGKILLed and started again on the same ports after ``--restart-gap`` seconds (the 12 s
of a pod restart). At the end:

* **no page**: no ``TritonSLOBurn`` of severity page and no ``TritonModelNotServing``
  reached the receiver (a ``TritonServerDown`` would need the server down for a minute);
* **every failure explained**: each canary series' failed requests (from the daemon's
  ``/metrics``) are accounted for by log lines: the failure log's whole lines and
  suppressed counts (``canary_request_failed``, ``canary_failures_suppressed``), and,
  for refused connections, which the failure log leaves to the readiness probe, a
  ``target_not_ready`` line for the series' target;
* the canaries succeeded again after the restart.

    python benchmarks/watch_soak.py [--duration 30m] [--restart-gap 12] [--json out.json]

``make soak`` runs it with the defaults. Not part of ``make test``: it takes half an
hour. The same scenarios at test scale (a restart, a moved name, an engine crash) are in
the suite.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import yaml
from prometheus_client.parser import text_string_to_metric_families

from alerting_support import SHIPPED, Alertmanager, WebhookReceiver
from real_mlserver import ECHO_MODEL, RealMLServer
from real_triton import RealTriton
from support import DaemonProcess, free_port, wait_until
from tritonwatch.config.units import parse_duration

TRITON_MODELS = ("batching", "streaming")
WATCHED_WITHIN = 60.0
"""A server that comes up after the daemon is watched within this long of being ready."""
PAGES = ("TritonSLOBurn", "TritonModelNotServing", "TritonServerDown")
"""Alert names that must not page in a healthy soak (a burn only as severity page)."""


@dataclass
class SoakResult:
    duration_seconds: float
    watched_after: dict[str, float] = field(default_factory=dict)
    """Series → seconds from the late server's readiness to its first success."""
    restarted_at: float | None = None
    """Seconds into the run when tritonserver was killed."""
    recovered_after: dict[str, float] = field(default_factory=dict)
    """Triton's series → seconds from the kill to its next success (the gap included)."""
    pages: list[dict[str, Any]] = field(default_factory=list)
    failures: dict[str, dict[str, float]] = field(default_factory=dict)
    """Series → failed requests by outcome, at the end."""
    logged: dict[str, int] = field(default_factory=dict)
    """Series → failed requests the failure log accounts for (whole lines + counts)."""
    unexplained: list[str] = field(default_factory=list)
    successes: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        recovered = self.restarted_at is None or all(
            key in self.recovered_after for key in self.successes if _on_triton(key)
        )
        watched = all(seconds <= WATCHED_WITHIN for seconds in self.watched_after.values())
        return not self.pages and not self.unexplained and recovered and watched


def _on_triton(series: str) -> bool:
    """Whether a series is one of tritonserver's (the server that starts late and restarts)."""
    return series.startswith("triton-")


def _series(labels: dict[str, str]) -> str:
    return f"{labels['target']}/{labels['model']}/{labels['protocol']}"


def canary_outcomes(daemon_url: str) -> dict[str, Counter[str]]:
    """Series → outcome → requests, from the daemon's exposition."""
    with urllib.request.urlopen(f"{daemon_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    found: dict[str, Counter[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "tritonwatch_canary_requests_total":
                counts = found.setdefault(_series(sample.labels), Counter())
                counts[sample.labels["outcome"]] += int(sample.value)
    return found


def explained_by_logs(events: list[dict[str, Any]]) -> tuple[Counter[str], set[str]]:
    """(series → failed requests the failure log accounts for, targets with a
    ``target_not_ready`` line)."""
    logged: Counter[str] = Counter()
    not_ready: set[str] = set()
    for event in events:
        name = event.get("event")
        if name == "target_not_ready":
            not_ready.add(str(event.get("target")))
        elif name in ("canary_request_failed", "canary_failures_suppressed"):
            key = _series({k: str(event.get(k)) for k in ("target", "model", "protocol")})
            logged[key] += int(event.get("count", 1))
    return logged, not_ready


def judge_failures(
    outcomes: dict[str, Counter[str]], logged: Counter[str], not_ready: set[str]
) -> list[str]:
    """The series whose failures no log line explains, each with why."""
    unexplained = []
    for key, counts in sorted(outcomes.items()):
        target = key.split("/", 1)[0]
        failed = sum(n for outcome, n in counts.items() if outcome != "success")
        refused = counts.get("connection_error", 0)
        if not failed:
            continue
        if refused and target not in not_ready:
            unexplained.append(f"{key}: {refused} connection errors, no target_not_ready line")
        # Refused connections are the readiness line's (the failure log leaves them out,
        # and /metrics cannot tell them from resets); every other failure the log's.
        needed = failed - (refused if target in not_ready else 0)
        if logged.get(key, 0) < needed:
            unexplained.append(f"{key}: {needed} failures, the log accounts for {logged[key]}")
    return unexplained


def _config(triton: RealTriton, mlserver: RealMLServer, alertmanager_url: str, path: Path) -> Path:
    path.write_text(
        f"""
targets:
  - name: triton-http
    url: {triton.http_url}
    metrics_url: {triton.metrics_url}
    models: [{{name: batching}}, {{name: streaming}}]
  - name: triton-grpc
    url: {triton.http_url}
    grpc_url: {triton.grpc_url}
    metrics_url: {triton.metrics_url}
    models: [{{name: batching, canary: {{protocol: grpc}}}}]
  - name: mlserver
    url: {mlserver.http_url}
    metrics_url: {mlserver.metrics_url}
    models: [{{name: {ECHO_MODEL}}}]
slo: {{latency: {{threshold: 1s}}}}
canary: {{rate: 2/s, timeout: 2s}}
scrape: {{interval: 5s, timeout: 2s}}
alerting: {{alertmanager_url: "{alertmanager_url}", evaluation_interval: 5s}}
"""
    )
    return path


def alertmanager_config(receiver_url: str, path: Path) -> Path:
    """The shipped config (its routes and inhibit rules), delivering to the receiver."""
    shipped = yaml.safe_load(SHIPPED.read_text())
    for receiver in shipped["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = receiver_url
    shipped["route"]["group_wait"] = "1s"
    path.write_text(yaml.safe_dump(shipped))
    return path


def run_soak(
    duration: float, restart_gap: float, folder: Path, late_start: float = 20.0
) -> SoakResult:
    result = SoakResult(duration)
    with contextlib.ExitStack() as cleanup:
        triton = RealTriton(TRITON_MODELS, log_path=folder / "triton.log")  # ports chosen
        cleanup.callback(triton.stop)
        mlserver = RealMLServer(folder / "mlserver").start()
        cleanup.callback(mlserver.stop)
        receiver = WebhookReceiver()
        cleanup.callback(receiver.close)
        am_config = alertmanager_config(receiver.url, folder / "alertmanager.yml")
        alertmanager = Alertmanager(am_config, folder / "am-data", free_port())
        cleanup.callback(alertmanager.stop)
        config = _config(triton, mlserver, alertmanager.url, folder / "tritonwatch.yaml")
        daemon = DaemonProcess(config)
        cleanup.callback(daemon.stop)
        started = time.monotonic()
        time.sleep(late_start)
        triton.start()
        ready = time.monotonic()
        none = {key: Counter[str]() for key in canary_outcomes(daemon.url) if _on_triton(key)}
        follow_recovery(daemon.url, none, ready, result.watched_after)
        time.sleep(max(0.0, duration / 2 - (time.monotonic() - started)))
        before = {k: v for k, v in canary_outcomes(daemon.url).items() if _on_triton(k)}
        assert triton.process is not None
        triton.process.send_signal(signal.SIGKILL)
        triton.process.wait(timeout=30)
        result.restarted_at = time.monotonic() - started
        killed = time.monotonic()
        time.sleep(restart_gap)
        triton.start()
        follow_recovery(daemon.url, before, killed, result.recovered_after)
        time.sleep(max(0.0, duration - (time.monotonic() - started)))
        outcomes = canary_outcomes(daemon.url)
        logged, not_ready = explained_by_logs(daemon.events)
        result.failures = {
            key: {o: n for o, n in counts.items() if o != "success" and n}
            for key, counts in outcomes.items()
        }
        result.successes = {key: counts.get("success", 0) for key, counts in outcomes.items()}
        result.logged = dict(logged)
        result.unexplained = judge_failures(outcomes, logged, not_ready)
        result.pages = [
            {"labels": a["labels"], "status": a.get("status")}
            for a in receiver.alerts()
            if a["labels"].get("alertname") in PAGES
            and a["labels"].get("severity", "page") == "page"
        ]
    return result


def follow_recovery(
    daemon_url: str, before: dict[str, Counter[str]], since: float, found: dict[str, float]
) -> None:
    """Waits (up to 3 minutes) until every series has succeeded more than ``before``;
    ``found`` gets each series' seconds from ``since`` to that success."""
    pending = set(before)

    def recovered() -> bool:
        now = canary_outcomes(daemon_url)
        for key in list(pending):
            if now.get(key, Counter())["success"] > before[key]["success"]:
                found[key] = round(time.monotonic() - since, 1)
                pending.discard(key)
        return not pending

    with contextlib.suppress(AssertionError):
        wait_until(recovered, timeout=180, what="every canary to succeed again", every=0.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", default="30m", help="how long the soak runs")
    parser.add_argument("--restart-gap", type=float, default=12.0,
                        help="seconds tritonserver stays down")  # fmt: skip
    parser.add_argument("--late-start", type=float, default=20.0,
                        help="seconds between the daemon's start and tritonserver's")  # fmt: skip
    parser.add_argument("--json", type=Path, help="write the result here as JSON")
    args = parser.parse_args()
    duration = parse_duration(args.duration)
    with tempfile.TemporaryDirectory(prefix="tritonwatch-watch-soak-") as tmp:
        result = run_soak(duration, args.restart_gap, Path(tmp), args.late_start)
    report = asdict(result) | {"passed": result.passed}
    text = json.dumps(report, indent=2, sort_keys=True)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
