"""Evaluator raises TritonServerDown and TritonModelNotServing from the readiness board
and the canary's series, on a stepped clock."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from tritonwatch.config import parse_config
from tritonwatch.records.observations import CanaryResult, Outcome, ReadinessObservation
from tritonwatch.runtime.evaluator import Evaluator
from tritonwatch.scrape.triton_scrapers import TritonScrapers
from tritonwatch.state.canary_board import CanaryBoard

CONFIG = """
targets:
  - name: t
    url: http://127.0.0.1:1
    models: [{name: m}]
"""
WALL = 1_700_000_000.0
DEVICE_LOST = "[500] device lost after load"


class Bench:
    """Evaluator over a CanaryBoard and a readiness board the test writes, one clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.readiness: dict[str, ReadinessObservation] = {}
        self.stats = CanaryBoard(wall_clock=lambda: WALL + self.now)
        self.stats.declare([("t", "m", "http")])
        self.evaluator = Evaluator(
            parse_config(CONFIG, "serving.yaml"),
            canary_board=self.stats,
            triton=TritonScrapers(),
            judged_states=list,  # nothing scraped
            registry=CollectorRegistry(),
            readiness=lambda: dict(self.readiness),
            clock=lambda: self.now,
            wall_clock=lambda: WALL + self.now,
        )

    def ready(self, at: float, ready: bool = True) -> None:
        outcome = Outcome.SUCCESS if ready else Outcome.CONNECTION_ERROR
        error = "" if ready else "connection refused"
        self.readiness["t"] = ReadinessObservation("t", at, outcome, ready, 0.001, error)

    def requests(self, start: int, end: int, outcome: Outcome, error: str = "") -> None:
        for second in range(start, end):
            latency = 0.01 if outcome == Outcome.SUCCESS else None
            result = CanaryResult("t", "m", "http", float(second), outcome, latency, error)
            self.stats.record(result)

    def firing_at(self, now: float) -> dict[str, dict[str, str]]:
        """Alert name → annotations of what fires after an evaluation at ``now``."""
        self.now = now
        self.evaluator.evaluate()
        return {a.labels["alertname"]: dict(a.annotations) for a in self.evaluator.firing()}


def test_a_ready_model_failing_every_request_for_a_minute_is_not_serving() -> None:
    """Breaks if the not-serving page comes before a minute of failures, lacks the last
    error or the failed count, or hides the availability burn beside it."""
    bench = Bench()
    bench.ready(at=0.0)
    bench.requests(0, 800, Outcome.SUCCESS)  # enough events for the 1 h page's gate
    bench.requests(800, 860, Outcome.HTTP_ERROR, DEVICE_LOST)
    early = bench.firing_at(859.0)  # failing for 59 s
    assert set(early) == {"TritonSLOBurn"}
    bench.requests(860, 861, Outcome.HTTP_ERROR, DEVICE_LOST)
    firing = bench.firing_at(860.0)
    assert set(firing) == {"TritonSLOBurn", "TritonModelNotServing"}
    (alert,) = [a for a in bench.evaluator.firing() if a.labels["alertname"] != "TritonSLOBurn"]
    assert dict(alert.labels) == {
        "alertname": "TritonModelNotServing", "severity": "page", "target": "t", "model": "m",
    }  # fmt: skip
    notes = firing["TritonModelNotServing"]
    assert notes["failed_requests"] == "61"
    assert notes["last_error"] == f"http_error: {DEVICE_LOST}"
    assert DEVICE_LOST in notes["description"]
    assert "for 60 s" in notes["description"]
    assert notes["runbook_url"] == "docs/runbook.md#tritonmodelnotserving"
    (verdict,) = bench.evaluator.not_serving()
    assert (verdict.target, verdict.model, verdict.failed) == ("t", "m", 61)

    bench.requests(861, 862, Outcome.SUCCESS)  # one success ends the run
    assert "TritonModelNotServing" not in bench.firing_at(862.0)


def test_client_errors_neither_make_nor_break_not_serving() -> None:
    """Breaks if our own client's faults (client_error) count as the server failing,
    or interrupt a run of real failures."""
    bench = Bench()
    bench.ready(at=0.0)
    bench.requests(0, 10, Outcome.SUCCESS)
    bench.requests(10, 100, Outcome.CLIENT_ERROR, "our parser")
    assert "TritonModelNotServing" not in bench.firing_at(100.0)
    bench.requests(100, 130, Outcome.TIMEOUT, "timed out")
    bench.requests(130, 170, Outcome.CLIENT_ERROR, "our parser")
    assert "TritonModelNotServing" in bench.firing_at(170.0)  # timeouts since 100


def test_a_model_of_a_down_server_is_the_servers_alert() -> None:
    """Breaks if a server not ready for a minute does not page as TritonServerDown, pages
    before the minute, or its failing model pages as not serving too."""
    bench = Bench()
    bench.requests(0, 10, Outcome.SUCCESS)
    bench.ready(at=10.0, ready=False)
    bench.requests(10, 100, Outcome.CONNECTION_ERROR, "refused")
    assert bench.firing_at(60.0) == {}
    bench.ready(at=65.0, ready=False)  # later checks keep the first one's time
    firing = bench.firing_at(70.0)
    assert set(firing) == {"TritonServerDown"}
    assert "for 60 s" in firing["TritonServerDown"]["description"]
    assert "connection refused" in firing["TritonServerDown"]["description"]
    (alert,) = bench.evaluator.firing()
    assert dict(alert.labels) == {
        "alertname": "TritonServerDown",
        "severity": "page",
        "target": "t",
    }


def test_a_twelve_second_restart_pages_nothing() -> None:
    """Breaks if a server down for 12 s five minutes after the daemon started, with its 5
    failed canary requests (then the circuit breaker), raises any alert at any
    evaluation (every 15 s) over the next half hour."""
    bench = Bench()
    for second in range(2100):
        down = 300 <= second < 312
        if second % 5 == 0:  # a readiness check every 5 s
            bench.ready(at=float(second), ready=not down)
        if not down:
            bench.requests(second, second + 1, Outcome.SUCCESS)
        elif second < 305:
            bench.requests(second, second + 1, Outcome.CONNECTION_ERROR, "refused")
        if second % 15 == 14:
            assert bench.firing_at(float(second)) == {}, second
    assert bench.evaluator.statuses()  # it did evaluate the SLOs
