"""The tuner against brute force (Model Analyzer's default search) on the simulator.

Brute force measures the cross product of instance counts 1-5 and several queue
delays, each with a concurrency sweep, and keeps the best in-budget throughput. The
tuner starts from the model's current config and changes one thing at a time.
Reported side by side: configurations measured and best in-budget throughput.
Goal: at most a third of the configurations, at least 90 % of brute force's best.

    python benchmarks/tuner_vs_grid.py [--scenario gpu-underused] [--model simple]
"""

from __future__ import annotations

import argparse
import copy
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from sim_process import SimProcess
from tritonwatch.analysis.sweep_verdict import judge_sweep
from tritonwatch.commands.tune.repository import ModelRepository
from tritonwatch.commands.tune.tuner import Tuner
from tritonwatch.records.sweep_records import SweepSettings
from tritonwatch.sweep.load_sweep import SweepRunner

INSTANCES = (1, 2, 3, 4, 5)
DELAYS_US = (0, 1000, 4000, 16000)


def best_in_budget(settings: SweepSettings) -> float:
    result = judge_sweep(SweepRunner(settings).run())
    return result.operating_point.inferences_per_second if result.operating_point else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="healthy")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--budget", type=float, default=0.05)
    parser.add_argument("--window", type=float, default=0.5)
    args = parser.parse_args()
    levels = (1.0, 2.0, 4.0, 8.0, 16.0)
    with SimProcess(scenario=args.scenario) as sim:
        settings = SweepSettings(url=sim.http_url, model=args.model, levels=levels,
                                 budget_p95=args.budget, window_seconds=args.window,
                                 max_windows=5)  # fmt: skip
        repository = ModelRepository(sim.http_url, args.model)
        original = repository.config()

        started = time.monotonic()
        tuned = Tuner(settings, apply=True, max_steps=8, metrics_url=sim.metrics_url).run()
        tuner_configs = len(tuned.history)  # baseline + one sweep per step
        repository.apply(tuned.final)
        tuner_best = best_in_budget(settings)
        tuner_seconds = time.monotonic() - started

        started = time.monotonic()
        grid_best, grid_config = 0.0, None
        for instances, delay in itertools.product(INSTANCES, DELAYS_US):
            config = copy.deepcopy(original)
            config["instance_group"][0]["count"] = instances
            if config.get("max_batch_size", 0) > 0:
                config.setdefault("dynamic_batching", {})["max_queue_delay_microseconds"] = delay
            elif delay:
                continue  # a non-batching model has no delay to vary
            repository.apply(config)
            best = best_in_budget(settings)
            if best > grid_best:
                grid_best, grid_config = best, (instances, delay)
        grid_configs = sum(1 for i, d in itertools.product(INSTANCES, DELAYS_US)
                           if original.get("max_batch_size", 0) > 0 or d == 0)  # fmt: skip
        grid_seconds = time.monotonic() - started
        repository.apply(original)
        repository.close()
    print(f"scenario {args.scenario}, model {args.model}, budget p95 {args.budget * 1e3:g} ms")
    print("search      | configs measured | best in-budget infer/s | seconds")
    print(f"tuner       | {tuner_configs:>16} | {tuner_best:>22.1f} | {tuner_seconds:>7.0f}")
    print(f"brute force | {grid_configs:>16} | {grid_best:>22.1f} | {grid_seconds:>7.0f}")
    print(
        f"ratio       | {tuner_configs / grid_configs:>16.2f} | {tuner_best / grid_best:>22.2f} |"
    )
    print(f"brute force's best (instances, delay µs): {grid_config}")


if __name__ == "__main__":
    main()
