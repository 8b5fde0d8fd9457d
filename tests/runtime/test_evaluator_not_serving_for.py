"""``alerting.not_serving_for`` is the hold the evaluator waits before a ready server's
model whose every canary request fails is ``TritonModelNotServing``: on a stepped clock,
not before the configured hold, from it on, and a reload's new hold from the next
evaluation."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from tritonwatch.config import Config, parse_config
from tritonwatch.records.observations import CanaryResult, Outcome, ReadinessObservation
from tritonwatch.runtime.evaluator import Evaluator
from tritonwatch.scrape.triton_scrapers import TritonScrapers
from tritonwatch.state.canary_board import CanaryBoard

TARGETS = """
targets:
  - name: t
    url: http://127.0.0.1:1
    models: [{name: m}]
"""
WALL = 1_700_000_000.0
NOT_SERVING = "TritonModelNotServing"


def _config(alerting: str = "") -> Config:
    return parse_config(TARGETS + alerting, "hold.yaml")


class Bench:
    """An evaluator over a canary board whose model fails every request from ``FAILING``
    on, behind a ready server; one stepped clock."""

    FAILING = 100

    def __init__(self, config: Config) -> None:
        self.now = 0.0
        self.board = CanaryBoard(wall_clock=lambda: WALL + self.now)
        self.board.declare([("t", "m", "http")])
        ready = ReadinessObservation("t", 0.0, Outcome.SUCCESS, True, 0.001)
        self.evaluator = Evaluator(
            config,
            canary_board=self.board,
            triton=TritonScrapers(),
            judged_states=list,  # nothing scraped
            registry=CollectorRegistry(),
            readiness=lambda: {"t": ready},
            clock=lambda: self.now,
            wall_clock=lambda: WALL + self.now,
        )
        self.requests(0, self.FAILING, Outcome.SUCCESS)

    def requests(self, start: int, end: int, outcome: Outcome) -> None:
        for second in range(start, end):
            latency = 0.01 if outcome == Outcome.SUCCESS else None
            error = "" if outcome == Outcome.SUCCESS else "[500] device lost"
            self.board.record(
                CanaryResult("t", "m", "http", float(second), outcome, latency, error)
            )

    def not_serving_at(self, now: float) -> bool:
        """Whether TritonModelNotServing fires after an evaluation at ``now``, with the
        failures up to ``now`` recorded."""
        self.requests(max(int(self.now) + 1, self.FAILING), int(now) + 1, Outcome.HTTP_ERROR)
        self.now = now
        self.evaluator.evaluate()
        return NOT_SERVING in {a.labels["alertname"] for a in self.evaluator.firing()}


def test_not_serving_waits_the_configured_hold_and_not_longer() -> None:
    """Breaks if a 5 s ``not_serving_for`` is not honoured: the page before 5 s of
    failures, or none once they are 5 s old (the default minute would not have paged)."""
    bench = Bench(_config("alerting: {not_serving_for: 5s}\n"))
    assert not bench.not_serving_at(100.0)  # the first failure
    assert not bench.not_serving_at(104.9)
    assert bench.not_serving_at(105.0)
    (verdict,) = bench.evaluator.not_serving()
    assert (verdict.failing_since, verdict.failing_seconds, verdict.failed) == (100.0, 5.0, 6)


def test_the_default_hold_is_a_minute() -> None:
    """Breaks if leaving ``not_serving_for`` out changes the minute the page waited."""
    bench = Bench(_config())
    assert bench.evaluator.not_serving() == []
    assert not bench.not_serving_at(105.0)
    assert not bench.not_serving_at(159.0)
    assert bench.not_serving_at(160.0)


def test_a_reload_brings_its_hold_in_force_at_the_next_evaluation() -> None:
    """Breaks if the evaluator keeps judging by the hold it started with after a reload
    lengthens it (the alert stays) or shortens it (no page until the old hold)."""
    short = _config("alerting: {not_serving_for: 5s}\n")
    bench = Bench(short)
    assert bench.not_serving_at(106.0)
    longer = _config("alerting: {not_serving_for: 30s}\n")
    bench.evaluator.apply(longer, longer)
    assert not bench.not_serving_at(107.0)
    assert bench.not_serving_at(130.0)
    bench.evaluator.apply(short, short)
    bench.requests(131, 132, Outcome.SUCCESS)  # a success ends the run...
    bench.now = 131.0
    assert not bench.not_serving_at(132.0)  # ...the next failure starts a new one
    assert bench.not_serving_at(137.0)
