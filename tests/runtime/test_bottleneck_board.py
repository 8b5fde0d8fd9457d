"""BottleneckBoard: scraped readings in, the same readings with their verdicts out."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from tritonwatch.config.schema import Config
from tritonwatch.records.observations import ModelRates
from tritonwatch.records.target_state import ModelState, TargetState
from tritonwatch.runtime.bottleneck_board import BottleneckBoard


def rates(queue: float, infer: float) -> ModelRates:
    """One model's window: every request queued ``queue`` s and computed ``infer`` s."""
    return ModelRates(
        model="m", version="", interval_seconds=15.0, counters_reset=False,
        requests_per_second=1.0, inferences_per_second=1.0, executions_per_second=1.0,
        failures_per_second=0.0, failures_per_second_by_reason={}, batch_size_average=1.0,
        request_seconds_average=queue + infer, queue_seconds_average=queue,
        compute_input_seconds_average=0.0, compute_infer_seconds_average=infer,
        compute_output_seconds_average=0.0, pending_requests=0.0,
    )  # fmt: skip


def scraped(queue: float, infer: float, canary: float | None = None) -> TargetState:
    model = ModelState("m", rates=rates(queue, infer), canary_mean_seconds=canary)
    return TargetState("t", {}, 0, {"m": model, "idle": ModelState("idle")}, {}, {})


def config(threshold: str) -> Config:
    return Config.model_validate(
        {
            "targets": [
                {
                    "name": "t",
                    "url": "http://127.0.0.1:8000",
                    "models": [{"name": "m", "slo": {"latency": {"threshold": threshold}}}],
                }
            ]
        }
    )


class Scraped:
    """Stands in for TritonScrapers.states: returns whatever the test set last."""

    def __init__(self, state: TargetState) -> None:
        self.state = state

    def __call__(self) -> list[TargetState]:
        return [self.state]


def test_a_bottleneck_must_be_worth_a_fifth_of_the_models_budget() -> None:
    """Breaks if the thresholds stop following each model's own SLO (20 % of its budget)."""
    source = Scraped(scraped(queue=0.015, infer=0.001))
    board = BottleneckBoard(source)
    board.apply(config("50ms"))  # 15 ms of queue is over the 10 ms floor
    (state,) = board.states()
    assert state.models["m"].bottleneck is not None
    assert state.models["m"].bottleneck.kind == "queue-bound"
    board.apply(config("100ms"))  # now under the 20 ms floor: judged again, balanced
    (state,) = board.states()
    assert state.models["m"].bottleneck is not None
    assert state.models["m"].bottleneck.kind == "balanced"


def test_verdicts_match_the_readings_they_came_from() -> None:
    """Breaks if a new scrape is served with the previous scrape's cached verdicts."""
    source = Scraped(scraped(queue=0.030, infer=0.001, canary=0.040))
    board = BottleneckBoard(source)
    board.apply(config("50ms"))
    (first,) = board.states()
    assert board.states()[0] is first  # one scrape is judged once
    breakdown = first.models["m"].breakdown
    assert breakdown is not None and breakdown.network_client == pytest.approx(0.009)
    assert first.models["idle"].breakdown is None and first.models["idle"].bottleneck is None
    source.state = scraped(queue=0.001, infer=0.030)
    (second,) = board.states()
    assert second.models["m"].bottleneck is not None
    assert second.models["m"].bottleneck.kind == "compute-bound"
    assert second.models["m"].rates == source.state.models["m"].rates


def test_a_change_of_kind_is_logged_once() -> None:
    """Breaks if bottleneck_changed is logged on every scrape, or not when the kind changes."""
    source = Scraped(scraped(queue=0.030, infer=0.001))
    board = BottleneckBoard(source)
    board.apply(config("50ms"))
    with capture_logs() as events:
        board.observe("t")
        source.state = scraped(queue=0.031, infer=0.001)
        board.observe("t")
        source.state = scraped(queue=0.001, infer=0.030)
        board.observe("t")
        board.observe("unknown")
    changes = [(e["kind"], e["previous"]) for e in events if e["event"] == "bottleneck_changed"]
    assert changes == [("queue-bound", None), ("compute-bound", "queue-bound")]
