"""The simulator's scenarios yield the matching bottleneck finding, end to end.

Each test drives a few requests in process, on virtual time, against a simulator in a
scenario, scrapes its real endpoints before and after, and judges the scraped state (the
wiring's :func:`~tritonwatch.analysis.breakdown.judge_target`) with a 50 ms latency
budget (so a bottleneck must be worth at least 10 ms). The stage times are then the
scenario's own on any host. The last test keeps the real canary on real time.
"""

from __future__ import annotations

import pytest
from sim_traffic import FakeClock, MeasuredCanary, infer_in_process, sim_target

import support
from support import wait_until
from tritonwatch.analysis.breakdown import BottleneckThresholds, judge_target
from tritonwatch.config.schema import Config
from tritonwatch.probe.canary.plans import canary_plans
from tritonwatch.probe.runner import CanaryRunner
from tritonwatch.records.target_state import ModelState
from tritonwatch.runtime.bottleneck_board import BottleneckBoard
from tritonwatch.scrape.target_scraper import TargetScraper
from tritonwatch.scrape.triton_scrapers import TritonScrapers, canary_totals
from tritonwatch.sim.server import Simulator
from tritonwatch.state.canary_board import CanaryBoard, latency_buckets

pytestmark = pytest.mark.sim

BUDGET = BottleneckThresholds.for_budget(0.050)


def finding(scenario: str, model: str, requests: int = 4) -> ModelState:
    """The model's state after ``requests`` one-at-a-time requests in ``scenario``, with
    their end-to-end latencies standing in for the canary's."""
    with Simulator(scenario=scenario, seed=0, clock="virtual") as sim:
        canary, clock = MeasuredCanary(), FakeClock()
        canary.add(model, [])
        scraper = TargetScraper(sim_target(sim, model), 5.0, clock, canary_totals=canary)
        scraper.scrape_once()
        canary.add(model, infer_in_process(sim, model, requests))
        clock.advance(10.0)
        scraper.scrape_once()
        state = judge_target(scraper.state(), {model: BUDGET}).models[model]
    assert state.breakdown is not None and state.bottleneck is not None
    assert state.breakdown.network_client is not None
    return state


def test_compute_bound() -> None:
    """45 ms kernels on a GPU 85 % busy elsewhere: compute_infer is nearly all the time."""
    state = finding("compute-bound", "resnet50")
    assert state.bottleneck is not None and state.breakdown is not None
    assert state.bottleneck.kind == "compute-bound"
    assert state.bottleneck.shares["compute_infer"] > 0.8
    assert state.breakdown.compute_infer > 0.045  # 45 ms asked, slowed by the busy GPU


def test_queue_delay_too_high() -> None:
    """A batch that never fills: every request waits out the 80 ms queue delay."""
    state = finding("queue-delay-too-high", "simple")
    assert state.bottleneck is not None and state.breakdown is not None
    assert state.bottleneck.kind == "queue-bound"
    assert state.bottleneck.shares["queue"] > 0.8
    assert state.breakdown.queue == pytest.approx(0.080, abs=1e-5)  # whole µs counters


def test_network_bound() -> None:
    """40 ms added after Triton's timers stop: only the end-to-end latency shows it."""
    state = finding("network-bound", "simple")
    assert state.bottleneck is not None and state.breakdown is not None
    assert state.bottleneck.kind == "network-bound"
    assert state.breakdown.network_client == pytest.approx(0.040, abs=1e-5)
    assert state.breakdown.server_seconds < 0.002


@pytest.mark.parametrize("model", ["simple", "resnet50"])
def test_healthy_is_balanced(model: str) -> None:
    """What is true of a healthy model: a few milliseconds per request, the largest stage
    (compute, or the client for the 1 ms model) far under 10 ms of the 50 ms budget, so
    nothing is worth acting on and the finding is balanced."""
    state = finding("healthy", model)
    assert state.bottleneck is not None and state.breakdown is not None
    assert state.bottleneck.kind == "balanced"
    assert max(state.breakdown.stages().values()) < BUDGET.min_stage_seconds


def test_network_bound_from_the_real_canary() -> None:
    """The daemon's wiring, on real time: the real open-loop canary at 20/s feeds
    network_client through :func:`canary_totals`, and the 10 ms floor comes from the
    config's 50 ms SLO."""
    with Simulator(scenario="network-bound", seed=0) as sim:
        config = Config.model_validate(
            {
                "targets": [sim_target(sim, "simple").model_dump()],
                "canary": {"rate": "20/s"},
                "slo": {"latency": {"threshold": "50ms"}},
            }
        )
        stats = CanaryBoard(latency_buckets([0.05]))
        scrapers = TritonScrapers(canary_totals=canary_totals(stats))
        scrapers.apply(config)
        judged = BottleneckBoard(scrapers.states)
        judged.apply(config)
        runner = CanaryRunner(stats)
        runner.start(canary_plans(config))

        def sent() -> int:
            return sum(snap.latency_count for snap in stats.snapshot(0.0))

        try:
            wait_until(lambda: sent() >= 1, 10, "a first canary result")
            scrapers.scrape("sim")
            baseline = sent()
            wait_until(lambda: sent() >= baseline + 6, 10, "six more canary results")
            scrapers.scrape("sim")
            judged.publish("sim")  # the daemon's scrape job judges after each cycle
            (target,) = judged.states()
        finally:
            runner.stop()
            scrapers.close()
    state = target.models["simple"]
    assert state.bottleneck is not None and state.breakdown is not None
    assert state.bottleneck.kind == "network-bound"
    # Real time: the canary waits at least the 40 ms slept after the server's timers stop
    # (less 1 ms for whole-µs counters); more only on a slow host, smoke-bounded at 5x.
    assert state.breakdown.network_client >= 0.039
    support.assert_within_smoke_bound(state.breakdown.network_client, 0.040, "network_client")
