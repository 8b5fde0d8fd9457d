"""Moved name: does the daemon follow a host name to a second real Triton, quietly?

Issue 25's case: two real tritonservers with the same models behind one host name, as a
Kubernetes Service or a DNS record would put them. ``tritonwatch run`` watches the name
(HTTP and gRPC canaries on ``batching``, the scrapes and the readiness probe through the
same name); after ``--before`` seconds of healthy traffic the name moves to the second
server and the first is SIGKILLed. Then:

* **followed**: every canary series succeeds again within :data:`FOLLOWED_WITHIN`
  (15 s) of the move;
* **said**: a ``canary_address_changed`` log line names the old and new address;
* **no page** reaches a real Alertmanager (the shipped routes and inhibit rules) in the
  ``--after`` seconds that follow.

The name is ``triton-moving.localhost``, answered by benchmarks/moving_name/
sitecustomize.py inside the daemon's interpreter (127.0.0.1 and the port of whichever
server the name points at now); the benchmark checks that the shim answers before it
starts the daemon, so no lookup of the name leaves the machine.

    python benchmarks/moved_name.py [--before 60] [--after 90] [--json out.json]

``make soak`` runs it after the watcher soak. The engine-level cases (a refused connect,
a blue/green switch, every address of a name) are in the suite
(tests/probe/test_engine_supervised.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from watch_soak import PAGES, alertmanager_config, canary_outcomes, follow_recovery

from alerting_support import Alertmanager, WebhookReceiver
from real_triton import RealTriton
from support import BIN, DaemonProcess, free_port, wait_until

NAME = "triton-moving.localhost"
HTTP, GRPC, METRICS = 8000, 8001, 8002
"""The ports the daemon is given on the name; the shim maps each to the real server's."""
SHIM = Path(__file__).resolve().parent / "moving_name"
FOLLOWED_WITHIN = 15.0
"""Issue 25: a moved name is followed within 15 s."""


@dataclass
class MovedNameResult:
    followed_after: dict[str, float] = field(default_factory=dict)
    """Series → seconds from the move (and the kill) to its next success."""
    address_changes: list[dict[str, Any]] = field(default_factory=list)
    pages: list[dict[str, Any]] = field(default_factory=list)
    failures: dict[str, dict[str, int]] = field(default_factory=dict)
    successes_after_move: dict[str, int] = field(default_factory=dict)
    """Series → requests that succeeded between the move and the end."""
    series: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        followed = set(self.followed_after) == set(self.series) and all(
            seconds <= FOLLOWED_WITHIN for seconds in self.followed_after.values()
        )
        return followed and bool(self.address_changes) and not self.pages


def point_name_at(table: Path, triton: RealTriton) -> None:
    """Moves :data:`NAME` to ``triton`` (one atomic rename: a lookup sees old or new)."""
    ports = {str(HTTP): triton.http_port, str(GRPC): triton.grpc_port,
             str(METRICS): triton.metrics_port}  # fmt: skip
    staged = table.with_suffix(".new")
    staged.write_text(json.dumps({NAME: ports}))
    staged.replace(table)


def shim_environment(table: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(SHIM), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "TRITONWATCH_MOVING_NAMES": str(table)}


def check_shim(table: Path, expected_port: int) -> None:
    """Refuses to go on unless the daemon's interpreter resolves :data:`NAME` through
    the shim: without it the name would go to the machine's resolver."""
    probe = (
        f"import socket; print(socket.getaddrinfo({NAME!r}, {HTTP}, type=socket.SOCK_STREAM)[0][4])"
    )
    done = subprocess.run(
        [str(BIN / "python"), "-c", probe],
        env={**os.environ, **shim_environment(table)},
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    if f"('127.0.0.1', {expected_port})" not in done.stdout:
        raise SystemExit(f"the name shim is not active: {done.stdout}{done.stderr}")


def _config(alertmanager_url: str, path: Path) -> Path:
    path.write_text(
        f"""
targets:
  - name: moving-http
    url: http://{NAME}:{HTTP}
    metrics_url: http://{NAME}:{METRICS}/metrics
    models: [{{name: batching}}]
  - name: moving-grpc
    url: http://{NAME}:{HTTP}
    grpc_url: grpc://{NAME}:{GRPC}
    metrics_url: http://{NAME}:{METRICS}/metrics
    models: [{{name: batching, canary: {{protocol: grpc}}}}]
slo: {{latency: {{threshold: 1s}}}}
canary: {{rate: 2/s, timeout: 2s}}
scrape: {{interval: 5s, timeout: 2s}}
alerting: {{alertmanager_url: "{alertmanager_url}", evaluation_interval: 5s}}
"""
    )
    return path


def run(before: float, after: float, folder: Path) -> MovedNameResult:
    result = MovedNameResult()
    table = folder / "names.json"
    with contextlib.ExitStack() as cleanup:
        first = RealTriton(["batching"], log_path=folder / "first.log").start()
        cleanup.callback(first.stop)
        second = RealTriton(["batching"], log_path=folder / "second.log").start()
        cleanup.callback(second.stop)
        point_name_at(table, first)
        check_shim(table, first.http_port)
        receiver = WebhookReceiver()
        cleanup.callback(receiver.close)
        am_config = alertmanager_config(receiver.url, folder / "alertmanager.yml")
        alertmanager = Alertmanager(am_config, folder / "am-data", free_port())
        cleanup.callback(alertmanager.stop)
        config = _config(alertmanager.url, folder / "tritonwatch.yaml")
        daemon = DaemonProcess(config, env=shim_environment(table))
        cleanup.callback(daemon.stop)
        wait_until(lambda: _succeeding(daemon.url) == 2, timeout=60, what="both canaries")
        time.sleep(before)
        moved_at = len(daemon.events)
        at_move = canary_outcomes(daemon.url)
        result.series = sorted(at_move)
        point_name_at(table, second)
        assert first.process is not None
        first.process.send_signal(signal.SIGKILL)
        moved = time.monotonic()
        follow_recovery(daemon.url, at_move, moved, result.followed_after)
        time.sleep(max(0.0, after - (time.monotonic() - moved)))
        end = canary_outcomes(daemon.url)
        result.successes_after_move = {
            key: end[key]["success"] - at_move[key]["success"] for key in result.series
        }
        result.failures = {
            key: {o: n - at_move[key][o] for o, n in end[key].items() if o != "success"}
            for key in result.series
        }
        result.address_changes = [
            {k: e.get(k) for k in ("target", "old", "new")}
            for e in daemon.events[moved_at:]
            if e.get("event") == "canary_address_changed"
        ]
        result.pages = [
            {"labels": a["labels"], "status": a.get("status")}
            for a in receiver.alerts()
            if a["labels"].get("alertname") in PAGES
            and a["labels"].get("severity", "page") == "page"
        ]
    return result


def _succeeding(daemon_url: str) -> int:
    return sum(1 for counts in canary_outcomes(daemon_url).values() if counts["success"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=float, default=60.0,
                        help="seconds of healthy traffic before the move")  # fmt: skip
    parser.add_argument("--after", type=float, default=90.0,
                        help="seconds watched after the move (pages counted)")  # fmt: skip
    parser.add_argument("--json", type=Path, help="write the result here as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tritonwatch-moved-name-") as tmp:
        result = run(args.before, args.after, Path(tmp))
    text = json.dumps(asdict(result) | {"passed": result.passed}, indent=2, sort_keys=True)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
