"""CPU per scrape cycle of one target: ours (/metrics + statistics + config, parsed and
turned into rates and breakdowns) against the anchor of fetching the same /metrics and
parsing it with prometheus_client, in the same run, on the simulator's three models.

``--models N`` watches N models instead (the simulator serving N copies of ``simple``
and ``resnet50``, as in footprint.py). ``--per-model`` adds a third column: the same
cycle with the statistics asked one request per model (the scraper's fallback form,
what every cycle did before it read them all in one ``GET /v2/models/stats``). The
columns alternate cycle by cycle, so they share the machine's load; each cycle's CPU is
``time.process_time`` of this process (the simulator runs in its own).

    python benchmarks/scrape_cycle.py [--cycles 100] [--models 20] [--per-model]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from sim_process import SimProcess
from tritonwatch.config import parse_config
from tritonwatch.scrape.target_scraper import TargetScraper
from tritonwatch.sim.builtin import BUILTIN_MODEL_SET
from tritonwatch.sim.models import ModelSet, parse_model_set

DEFAULT_MODELS = ("simple", "resnet50", "text_identity")
_NEVER = 10**12
"""A cycle number no scraper reaches: its all-models form stays off, so it asks per model."""


def model_set(count: int) -> tuple[ModelSet, list[str]]:
    """``count`` copies of the built-in ``simple`` and ``resnet50``, alternating, and their
    names (``simple_00``, ``resnet50_01``, …)."""
    builtin = {model["name"]: model for model in BUILTIN_MODEL_SET["models"]}
    models: list[dict[str, Any]] = []
    for index in range(count):
        base = "simple" if index % 2 == 0 else "resnet50"
        model = copy.deepcopy(builtin[base])
        model["name"] = f"{base}_{index:02d}"
        models.append(model)
    gpus = copy.deepcopy(BUILTIN_MODEL_SET["gpus"])
    placed = parse_model_set({"gpus": gpus, "models": models}, source="<scrape_cycle>")
    return placed, [model["name"] for model in models]


def _scraper(sim: SimProcess, names: list[str], *, per_model: bool = False) -> TargetScraper:
    listed = ", ".join(f"{{name: {name}}}" for name in names)
    config = parse_config(
        f"targets: [{{name: sim, url: '{sim.http_url}', metrics_url: '{sim.metrics_url}', "
        f"models: [{listed}]}}]\n",
        "bench.yaml",
    )
    scraper = TargetScraper(config.targets[0], timeout=5.0)
    if per_model:
        scraper._all_statistics.off_since = _NEVER
    return scraper


def _cpu(work: Any) -> float:
    started = time.process_time()
    work()
    return time.process_time() - started


def measure_forms(
    cycles: int = 100, models: int = 0, *, per_model: bool = False
) -> dict[str, list[float]]:
    """CPU seconds per cycle by column (``ours``, ``anchor``, and ``per_model`` when
    asked), alternating cycle by cycle on one simulator; ``models`` 0 is the three
    default models."""
    if models:
        placed, names = model_set(models)
        sim_process = SimProcess(placed, summary_latencies=True)
    else:
        names = list(DEFAULT_MODELS)
        sim_process = SimProcess(summary_latencies=True)
    with sim_process as sim:
        scrapers = {"ours": _scraper(sim, names)}
        if per_model:
            scrapers["per_model"] = _scraper(sim, names, per_model=True)
        session = requests.Session()

        def anchor() -> None:
            text = session.get(sim.metrics_url, timeout=5).text
            for family in text_string_to_metric_families(text):
                for _sample in family.samples:
                    pass

        work = {name: scraper.scrape_once for name, scraper in scrapers.items()}
        work["anchor"] = anchor
        results: dict[str, list[float]] = {name: [] for name in work}
        for cycle in range(cycles):
            order = list(work) if cycle % 2 == 0 else list(reversed(work))
            for name in order:
                results[name].append(_cpu(work[name]))
        for scraper in scrapers.values():
            scraper.close()
        session.close()
    return results


def measure(cycles: int = 100, models: int = 0) -> tuple[list[float], list[float]]:
    """CPU seconds per cycle, ours and the anchor's, alternating cycle by cycle."""
    results = measure_forms(cycles, models)
    return results["ours"], results["anchor"]


def _summary(seconds: list[float]) -> str:
    ms = [s * 1e3 for s in seconds]
    spread = f"{statistics.median(ms):.2f} [{min(ms):.2f}–{max(ms):.2f}]"
    return f"{spread}, mean {statistics.fmean(ms):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--models", type=int, default=0, help="0: the three default models")
    parser.add_argument("--per-model", action="store_true", help="add the per-model form")
    args = parser.parse_args()
    results = measure_forms(args.cycles, args.models, per_model=args.per_model)
    print(
        f"{args.cycles} cycles, {args.models or len(DEFAULT_MODELS)} models;"
        " CPU ms per cycle, median [min–max] and mean (the config is polled every 4th)"
    )
    anchor = statistics.median(results["anchor"])
    for name, seconds in results.items():
        ratio = statistics.median(seconds) / anchor
        print(f"{name:>10} | {_summary(seconds):>36} | ×{ratio:.2f} of the anchor")


if __name__ == "__main__":
    main()
