"""CPU per scrape cycle of one target: ours (/metrics + statistics + config, parsed and
turned into rates and breakdowns) against the anchor of fetching the same /metrics and
parsing it with prometheus_client, in the same run, on the simulator's three models.

    python benchmarks/scrape_cycle.py [--cycles 100]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from sim_process import SimProcess
from tritonwatch.config import parse_config
from tritonwatch.scrape.target_scraper import TargetScraper


def measure(cycles: int = 100) -> tuple[list[float], list[float]]:
    """CPU seconds per cycle, ours and the anchor's, alternating cycle by cycle."""
    with SimProcess(summary_latencies=True) as sim:
        config = parse_config(
            f"targets: [{{name: sim, url: '{sim.http_url}', metrics_url: '{sim.metrics_url}', "
            "models: [{name: simple}, {name: resnet50}, {name: text_identity}]}]\n",
            "bench.yaml",
        )
        scraper = TargetScraper(config.targets[0], timeout=5.0)
        session = requests.Session()
        ours, anchor = [], []
        for _ in range(cycles):
            started = time.process_time()
            scraper.scrape_once()
            ours.append(time.process_time() - started)
            started = time.process_time()
            text = session.get(sim.metrics_url, timeout=5).text
            for family in text_string_to_metric_families(text):
                for _sample in family.samples:
                    pass
            anchor.append(time.process_time() - started)
        scraper.close()
        session.close()
    return ours, anchor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=100)
    args = parser.parse_args()
    ours, anchor = measure(args.cycles)
    ours_ms, anchor_ms = statistics.median(ours) * 1e3, statistics.median(anchor) * 1e3
    print(
        "per cycle, median CPU ms | ours (metrics+stats+config, rates)"
        " | anchor (GET + prometheus_client parse) | ratio"
    )
    print(f"{'':>24} | {ours_ms:>35.2f} | {anchor_ms:>38.2f} | {ours_ms / anchor_ms:.2f}")


if __name__ == "__main__":
    main()
