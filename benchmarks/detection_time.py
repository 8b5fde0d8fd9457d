"""Detection time: from the start of a 5× latency spike to the page at a webhook receiver.

The simulator serves a 15 ms model (a 5× spike takes it to 75 ms, over the 50 ms
threshold); the real daemon (default intervals: canary 1/s, evaluation 15 s) watches it
and sends to a real Alertmanager, which delivers to a local webhook receiver. After a
warm-up of good traffic the spike starts; the clock stops at the first TritonSLOBurn
page. Run once per latency objective: the SRE Workbook's 14.4× page over 1 h needs the
error ratio above 14.4 × (1 − objective), so the objective decides what is possible.

The warm-up is at least what the page's long window needs to hold its minimum of events
(``slo.alert_min_bad_events`` / (14.4 × budget): 695 canary requests at 99.9 %, about
12 minutes at 1/s, 14 at 95 %): before that, by design, no burn pages, so a shorter
warm-up would time the gate instead of the detection (:func:`warm_up_for`).

    python benchmarks/detection_time.py [--objectives 0.95,0.999] [--warm-up 60] [--limit 240]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from alerting_support import Alertmanager, WebhookReceiver, fast_config
from sim_process import SimProcess
from support import TRITONWATCH, free_port
from tritonwatch.analysis.slo import BURN_POLICY
from tritonwatch.config.slo_schema import DEFAULT_ALERT_MIN_BAD_EVENTS
from tritonwatch.sim.testing import model_set_with

FIFTEEN_MS = {"timing": {"compute_infer": "15ms", "compute_infer_per_item": 0, "noise_sigma": 0.05},
              "dynamic_batching": None}  # fmt: skip


CANARY_RATE = 1.0
"""The daemon's default canary rate (requests per second per model)."""


def warm_up_for(objective: float, given: float) -> float:
    """``given``, or longer: the seconds of good traffic after which the 1 h page's long
    window holds its minimum of events at the default canary rate (plus 30 s)."""
    page = BURN_POLICY[0]
    needed = page.min_events(1.0 - objective, DEFAULT_ALERT_MIN_BAD_EVENTS) / CANARY_RATE
    return max(given, needed + 30.0)


def measure(objective: float, warm_up: float, limit: float, folder: Path) -> float | None:
    receiver = WebhookReceiver()
    am_config = folder / f"am-{objective}.yml"
    am_config.write_text(yaml.safe_dump(fast_config(receiver.url)))
    alertmanager = Alertmanager(am_config, folder / f"am-{objective}", free_port())
    try:
        with SimProcess(models=model_set_with(simple=FIFTEEN_MS)) as sim:
            config = folder / f"c-{objective}.yaml"
            config.write_text(
                f"targets: [{{name: sim, url: '{sim.http_url}', models: [{{name: simple}}]}}]\n"
                f"slo: {{latency: {{threshold: 50ms, objective: {objective}}}}}\n"
                f"alerting: {{alertmanager_url: '{alertmanager.url}'}}\n"
            )
            daemon = subprocess.Popen(
                [TRITONWATCH, "run", "--config", str(config), "--listen", "127.0.0.1:0",
                 "--log-format", "json"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            try:
                time.sleep(warm_up_for(objective, warm_up))
                sim.inject_fault(kind="latency_spike", factor=5)
                started = time.monotonic()
                while time.monotonic() - started < limit:
                    if any(a["labels"].get("severity") == "page" for a in receiver.alerts()):
                        return time.monotonic() - started
                    time.sleep(0.2)
                return None
            finally:
                daemon.terminate()
                daemon.wait(timeout=10)
    finally:
        alertmanager.stop()
        receiver.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objectives", default="0.95,0.999")
    parser.add_argument("--warm-up", type=float, default=60.0)
    parser.add_argument("--limit", type=float, default=240.0)
    args = parser.parse_args()
    print(f"warm-up {args.warm_up:g} s of good traffic, default intervals, limit {args.limit:g} s")
    print("latency objective | seconds from spike to page | goal ≤ 60 s")
    with tempfile.TemporaryDirectory() as tmp:
        for objective in (float(o) for o in args.objectives.split(",")):
            seconds = measure(objective, args.warm_up, args.limit, Path(tmp))
            shown = f"{seconds:.1f}" if seconds is not None else f"no page within {args.limit:g}"
            verdict = "met" if seconds is not None and seconds <= 60 else "missed"
            print(f"{objective:>17} | {shown:>26} | {verdict}")


if __name__ == "__main__":
    main()
