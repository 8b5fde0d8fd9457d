"""Canary quantile accuracy: the canary's p50/p95/p99 against the simulator's ground truth.

The simulator records the true server-side duration of every request it completes
(``Simulator.latency_samples``), so for the very requests the canary sent we know the
exact answer. It runs in its own process (client and server must not share a GIL)
with three models of known service-time distributions:

* ``lognormal_100ms_http`` and ``lognormal_100ms_grpc``: 100 ms log-normal (σ 0.25),
  the model the canary's accuracy goal is stated for (p95 within 5 %), over each protocol;
* ``lognormal_10ms_http``: 10 ms, where the canary's own client, timer and loopback time
  is a visible share; its goal (issue 15) is p95 within max(0.3 ms, 5 %) of the truth.

For the 10 ms model "the truth" needs care. The simulator records its *service time*,
not its own HTTP handling (aiohttp parsing and writing in Python, ~1-2 ms on a two-core
host), which any client pays: no client can come within 0.3 ms of it. So after the
canaries stop, real ``perf_analyzer --request-rate-range <rate>`` measures the same
model over HTTP: its p95 is the end-to-end truth a good client sees from this server,
and the goal is stated against it (the service-time gap is still reported).

The canary is the daemon's own code (``CanaryRunner`` with one plan per model,
open loop, HTTP binary tensors or gRPC), all three models at once; our figures are
the 5-minute window quantiles the daemon exports as
``tritonwatch_latency_quantile_seconds``. Both sides use the same nearest-rank rule.
End to end can only add time, so the canary's figure should sit slightly above.

    python benchmarks/canary_accuracy.py [--seconds 40] [--rate 10] [--repeats 1]
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from canary_vs_perf_analyzer import perf_analyzer_at
from harness import Goal, Row, median

from sim_process import SimProcess
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.runner import CanaryRunner
from tritonwatch.records.quantiles import quantiles
from tritonwatch.sim.builtin import BUILTIN_MODEL_SET
from tritonwatch.sim.models import ModelSet, parse_model_set
from tritonwatch.state.canary_board import CanaryBoard, latency_buckets

QUANTILES = (0.5, 0.95, 0.99)
MODELS = {  # name: (median service time, protocol)
    "lognormal_100ms_http": ("100ms", "http"),
    "lognormal_100ms_grpc": ("100ms", "grpc"),
    "lognormal_10ms_http": ("10ms", "http"),
}
GOAL_MODELS = ("lognormal_100ms_http", "lognormal_100ms_grpc")
"""The models the ≤ 5 % goal is stated for (README: "on a 100 ms model")."""
FAST_MODEL = "lognormal_10ms_http"
"""The model of issue 15's goal: p95 within max(0.3 ms, 5 %) of the truth."""


def model_set() -> ModelSet:
    """``simple``'s tensors with a log-normal service time, no batching, six instances
    each on its own GPU with little occupancy, so requests never queue behind each
    other: the server's time is the distribution alone."""
    simple = next(m for m in BUILTIN_MODEL_SET["models"] if m["name"] == "simple")
    models: list[dict[str, Any]] = []
    for index, (name, (median_time, _)) in enumerate(MODELS.items()):
        model = copy.deepcopy(simple)
        model.pop("dynamic_batching", None)
        model.update(
            name=name,
            instance_group={"count": 6, "kind": "KIND_GPU", "gpus": [index]},
            gpu_occupancy={"base": 0.05, "per_item": 0.0},
            timing={
                "compute_input": 0,
                "compute_input_per_item": 0,
                "compute_output": 0,
                "compute_output_per_item": 0,
                "compute_infer": median_time,
                "compute_infer_per_item": 0,
                "noise_sigma": 0.25,
            },
        )
        models.append(model)
    return parse_model_set({"gpus": BUILTIN_MODEL_SET["gpus"], "models": models}, source="<bench>")


@dataclass(frozen=True)
class Accuracy:
    """One model of one repeat: quantile → seconds, ours (canary) and the truth."""

    model: str
    protocol: str
    requests: int
    ours: dict[float, float]
    truth: dict[float, float]
    perf_analyzer: dict[float, float] | None = None
    """perf_analyzer's end-to-end quantiles on the same model afterwards (10 ms model)."""

    def error(self, quantile: float) -> float:
        """Relative error of our quantile against the truth (positive: ours is higher)."""
        return self.ours[quantile] / self.truth[quantile] - 1.0


def measure(seconds: float = 40.0, rate: float = 10.0, seed: int = 3) -> list[Accuracy]:
    """Runs the three canaries for ``seconds`` at ``rate`` each against a fresh simulator."""
    with SimProcess(models=model_set(), seed=seed) as sim:
        common = {"target": "sim", "version": "", "http_url": sim.http_url, "rate": rate,
                  "grpc_url": f"grpc://{sim.grpc_url}", "poisson": False, "timeout": 2.0,
                  "max_in_flight": 8, "data": "random"}  # fmt: skip
        plans = [
            CanaryPlan(model=name, protocol=protocol, **common)
            for name, (_, protocol) in MODELS.items()
        ]
        runner = CanaryRunner(CanaryBoard(latency_buckets([0.05])))
        try:
            runner.start(plans)
            time.sleep(seconds)
        finally:
            runner.stop()  # before reading the truth: both sides then hold the same requests
        snapshots = {snap.model: snap for snap in runner.board.snapshot(time.monotonic())}
        results = []
        for name, (_, protocol) in MODELS.items():
            snap = snapshots[name]
            truth = quantiles(sim.latency_samples(name), QUANTILES)
            ours = {q: snap.window_quantiles["5m"][q] for q in QUANTILES}
            results.append(Accuracy(name, protocol, snap.latency_count, ours, truth))
        # After the truth is read: perf_analyzer's requests are not the canary's.
        host_port = sim.http_url.removeprefix("http://")
        reference = perf_analyzer_at(host_port, FAST_MODEL, "http", rate, input_data="random")
    fast = next(r for r in results if r.model == FAST_MODEL)
    results[results.index(fast)] = replace(fast, perf_analyzer=reference.quantiles)
    return results


def fast_goal_rows(results: list[Accuracy]) -> list[Row]:
    """The 10 ms model: the canary's p95 against perf_analyzer's on the same simulator
    (goal: within max(0.3 ms, 5 %)), and its gap to the service time (information)."""
    measured = [(r, r.perf_analyzer[0.95]) for r in results if r.perf_analyzer is not None]
    reference = [p95 for _, p95 in measured]
    bound = max(0.3e-3, 0.05 * (median(reference) or 0.0)) * 1e3
    return [
        Row(
            f"{FAST_MODEL} p95, canary and perf_analyzer (same rate, after it)",
            [r.ours[0.95] * 1e3 for r, _ in measured],
            [p95 * 1e3 for p95 in reference],
            unit="ms",
        ),
        Row(
            f"{FAST_MODEL} p95 gap, canary to perf_analyzer (absolute)",
            [abs(r.ours[0.95] - p95) * 1e3 for r, p95 in measured],
            unit="ms",
            goal=Goal("<=", round(bound, 3), on="ours", unit="ms"),
        ),
        Row(
            f"{FAST_MODEL} p95 gap, canary to the service time (the simulator's HTTP "
            "handling included)",
            [(r.ours[0.95] - r.truth[0.95]) * 1e3 for r in results],
            unit="ms",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--rate", type=float, default=10.0, help="canary requests/s per model")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    print("model | requests | quantile | canary ms | truth ms | error | perf_analyzer ms")
    for repeat in range(args.repeats):
        for result in measure(args.seconds, args.rate, seed=3 + repeat):
            for q in QUANTILES:
                reference = result.perf_analyzer[q] * 1e3 if result.perf_analyzer else None
                print(
                    f"{result.model} | {result.requests} | p{q * 100:g} | "
                    f"{result.ours[q] * 1e3:.2f} | {result.truth[q] * 1e3:.2f} | "
                    f"{result.error(q):+.1%} | "
                    + (f"{reference:.2f}" if reference is not None else "—")
                )


if __name__ == "__main__":
    main()
