"""The evaluator's "no safe change" verdict, from its inputs to the rendered /metrics: a
model that burns its SLO with a bottleneck and gets no recommendation is exported as
``tritonwatch_advice_blocked`` with its reason (analysis/advice_blocked.py), and one that
does not burn is not (stepped clocks, hand-made scrapes)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tritonwatch.config import parse_config
from tritonwatch.records.observations import (
    CanaryResult,
    ModelKey,
    ModelRates,
    Outcome,
    TritonRates,
)
from tritonwatch.records.target_state import ModelState, ScrapeOutcome, TargetState
from tritonwatch.runtime.bottleneck_board import BottleneckBoard
from tritonwatch.runtime.evaluator import Evaluator
from tritonwatch.scrape.triton_scrapers import TritonScrapers
from tritonwatch.state.canary_board import CanaryBoard

CONFIG = parse_config(
    """
targets:
  - name: t
    url: http://127.0.0.1:1
    models: [{name: m, slo: {latency: {threshold: 50ms}}}]
""",
    "advice_blocked.yaml",
)
WALL = 1_700_000_000.0
COMPUTE_BOUND = ModelRates(
    model="m",
    version="",
    interval_seconds=15.0,
    counters_reset=False,
    requests_per_second=1.0,
    inferences_per_second=1.0,
    executions_per_second=1.0,
    failures_per_second=0.0,
    failures_per_second_by_reason={},
    batch_size_average=1.0,
    request_seconds_average=0.031,
    queue_seconds_average=0.001,
    compute_input_seconds_average=0.0,
    compute_infer_seconds_average=0.030,
    compute_output_seconds_average=0.0,
    pending_requests=0.0,
)
"""30 ms of the model's own compute in a 50 ms budget: compute-bound."""


class Bench:
    """An evaluator over a canary board the test writes and one scraped state (a
    compute-bound model whose server answers no config API), on one stepped clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.stats = CanaryBoard(wall_clock=lambda: WALL + self.now)
        self.stats.declare([("t", "m", "http")])
        state = TargetState("t", {}, 0, {"m": ModelState("m", rates=COMPUTE_BOUND)}, {}, {})
        board = BottleneckBoard(lambda: [state])
        board.apply(CONFIG)
        self.registry = CollectorRegistry()
        self.evaluator = Evaluator(
            CONFIG,
            canary_board=self.stats,
            triton=TritonScrapers(),
            judged_states=board.states,
            registry=self.registry,
            clock=lambda: self.now,
            wall_clock=lambda: WALL + self.now,
        )

    def requests(self, start: int, end: int, outcome: Outcome) -> None:
        for second in range(start, end):
            latency = 0.04 if outcome == Outcome.SUCCESS else None
            self.stats.record(CanaryResult("t", "m", "http", float(second), outcome, latency))

    def evaluate_at(self, now: float) -> dict[tuple[str, str], str]:
        """Scrapes (the advisor's window) and evaluates at ``now``; returns what the
        rendered exposition says is blocked: (target, model) → reason."""
        self.now = now
        rates = TritonRates(15.0, {ModelKey("m", ""): COMPUTE_BOUND}, {})
        self.evaluator.observe_scrape(ScrapeOutcome("t", now, {}, 0, rates))
        self.evaluator.evaluate()
        text = generate_latest(self.registry).decode()
        (family,) = [
            f
            for f in text_string_to_metric_families(text)
            if f.name == "tritonwatch_advice_blocked"
        ]
        found = {}
        for sample in family.samples:
            assert sample.value == 1.0
            found[(sample.labels["target"], sample.labels["model"])] = sample.labels["reason"]
        return found


def test_a_burning_model_with_no_safe_change_is_exported_as_blocked() -> None:
    """Breaks if the evaluator never counts a model as burning (its blocked reason is
    then never given), or the reason it gives never reaches /metrics as
    ``tritonwatch_advice_blocked``; or a model is called blocked before it burns."""
    bench = Bench()
    bench.requests(0, 800, Outcome.SUCCESS)  # enough events for the burn alerts' gate
    assert bench.evaluate_at(800.0) == {}  # healthy: silence
    assert bench.evaluator.recommendations.blocked() == {}
    bench.requests(800, 860, Outcome.HTTP_ERROR)
    found = bench.evaluate_at(860.0)
    assert any(s.firing is not None for s in bench.evaluator.statuses())  # it burns
    assert bench.evaluator.recommendations.active() == []
    assert bench.evaluator.recommendations.blocked() == {("t", "m"): "no_config_api"}
    assert found == {("t", "m"): "no_config_api"}
