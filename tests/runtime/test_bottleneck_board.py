"""BottleneckBoard: scraped readings in, the same readings with their verdicts out,
judged once when a scrape is published or a reload applies, never on read."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from structlog.testing import capture_logs

from tritonwatch.config.schema import Config
from tritonwatch.records.observations import ModelRates
from tritonwatch.records.target_state import ModelState, TargetState
from tritonwatch.runtime import bottleneck_board
from tritonwatch.runtime.bottleneck_board import BottleneckBoard

WAIT = 30.0
"""Real seconds a wait may take (what it waits for takes well under a second)."""


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
    """Breaks if the thresholds stop following each model's own SLO (20 % of its budget),
    or a reload leaves the old thresholds' verdicts in place until the next scrape."""
    source = Scraped(scraped(queue=0.015, infer=0.001))
    board = BottleneckBoard(source)
    board.apply(config("50ms"))  # 15 ms of queue is over the 10 ms floor
    (state,) = board.states()
    assert state.models["m"].bottleneck is not None
    assert state.models["m"].bottleneck.kind == "queue-bound"
    board.apply(config("100ms"))  # now under the 20 ms floor: judged again at once
    (state,) = board.states()
    assert state.models["m"].bottleneck is not None
    assert state.models["m"].bottleneck.kind == "balanced"


def test_a_scrape_is_judged_when_published_and_never_on_read() -> None:
    """Breaks if a read judges (a new scrape shows before its publish, or two reads of
    one scrape give two objects), or a published state's verdicts do not match its
    readings."""
    source = Scraped(scraped(queue=0.030, infer=0.001, canary=0.040))
    board = BottleneckBoard(source)
    board.apply(config("50ms"))
    (first,) = board.states()
    assert board.states()[0] is first  # one scrape, one judgement
    breakdown = first.models["m"].breakdown
    assert breakdown is not None and breakdown.network_client == pytest.approx(0.009)
    assert first.models["idle"].breakdown is None and first.models["idle"].bottleneck is None
    source.state = scraped(queue=0.001, infer=0.030)
    assert board.states()[0] is first  # scraped, not yet published: the reads judge nothing
    second = board.publish("t")
    assert second is not None and board.states() == [second]
    assert second.models["m"].bottleneck is not None
    assert second.models["m"].bottleneck.kind == "compute-bound"
    assert second.models["m"].rates == source.state.models["m"].rates
    assert board.publish("unknown") is None  # a target no longer scraped
    assert board.states() == [second]


def test_a_change_of_kind_is_logged_once() -> None:
    """Breaks if bottleneck_changed is logged on every scrape, or not when the kind changes."""
    source = Scraped(scraped(queue=0.030, infer=0.001))
    board = BottleneckBoard(source)
    board.apply(config("50ms"))
    with capture_logs() as events:
        board.publish("t")
        source.state = scraped(queue=0.031, infer=0.001)
        board.publish("t")
        source.state = scraped(queue=0.001, infer=0.030)
        board.publish("t")
        board.publish("unknown")
    changes = [(e["kind"], e["previous"]) for e in events if e["event"] == "bottleneck_changed"]
    assert changes == [("queue-bound", None), ("compute-bound", "queue-bound")]


def test_a_reload_during_a_scrapes_judgement_is_not_undone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Breaks if a scrape's judgement under the old thresholds, held while a reload puts
    new ones in force, lands after the reload's and leaves the old verdict in place; or
    if a reader waits for a judgement in flight."""
    source = Scraped(scraped(queue=0.015, infer=0.001))
    board = BottleneckBoard(source)
    board.apply(config("50ms"))
    inside, release = threading.Event(), threading.Event()
    judge = bottleneck_board.judge_target

    def held(state: TargetState, thresholds: Any = None) -> TargetState:
        if threading.current_thread().name == "scrape-job":
            inside.set()
            release.wait(WAIT)
        return judge(state, thresholds)

    monkeypatch.setattr(bottleneck_board, "judge_target", held)
    scrape = threading.Thread(target=board.publish, args=("t",), name="scrape-job")
    scrape.start()
    assert inside.wait(WAIT)
    reload = threading.Thread(target=board.apply, args=(config("100ms"),))
    reload.start()
    (during,) = board.states()  # a reader does not wait for the held judgement
    assert during.models["m"].bottleneck is not None
    assert during.models["m"].bottleneck.kind == "queue-bound"
    release.set()
    scrape.join(WAIT)
    reload.join(WAIT)
    (after,) = board.states()
    assert after.models["m"].bottleneck is not None
    assert after.models["m"].bottleneck.kind == "balanced"  # the reload's thresholds
