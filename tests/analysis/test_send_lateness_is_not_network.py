"""The canary's own send lateness (its thread woke late) is the client's scheduling:
it stays out of the end-to-end latency that the breakdown's ``network_client`` and the
advisor's ``reduce_network_overhead`` subtract Triton's time from (issue 25, item 9)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from canary_record_support import with_sender
from tritonwatch.analysis.advisor_records import AdvisorInput, AdvisorThresholds
from tritonwatch.analysis.advisor_rules import reduce_network_overhead
from tritonwatch.analysis.breakdown import latency_breakdown
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.model_canary import ModelCanary
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.records.observations import ModelRates
from tritonwatch.scrape.triton_scrapers import canary_totals
from tritonwatch.state.canary_board import CanaryBoard

PLAN = CanaryPlan("t", "m", "", "http", "http://127.0.0.1:9", "", 10.0, False, 5.0, 1, "zero")
SERVER_SECONDS = 0.004
ANSWER_AFTER_WAKE = 0.005
LATE = 0.040
"""Each request taken up 40 ms after its intended time: eight times the server's work,
which would read as a network-bound model if it were counted as latency."""


def _rates() -> ModelRates:
    return ModelRates(
        "m", "1", 15.0, False, 1.0, 1.0, 1.0, 0.0, {}, 1.0,
        SERVER_SECONDS, 0.0, 0.0, SERVER_SECONDS, 0.0, 0.0,
    )  # fmt: skip


def _late_requests(stats: CanaryBoard, count: int = 10) -> None:
    """Requests answered 5 ms after the canary's thread woke, 40 ms late, for their
    intended times; recorded by the canary's own judging (``record``, where the engine and
    the library path hand each request's end)."""
    stats.declare([PLAN.key])
    engine = CanaryEngine()
    canary = ModelCanary(PLAN, object(), stats, engine=engine, clock=lambda: 150.0)  # type: ignore[arg-type]
    with_sender(canary)
    for n in range(count):
        intended = 100.0 + n
        woke = intended + LATE
        answer = SimpleNamespace(received_at=woke + ANSWER_AFTER_WAKE, abs=1e-9)
        canary.record(intended, answer, woke)


def test_the_canary_records_lateness_beside_the_latency_not_in_it() -> None:
    """Breaks if the canary's latency starts at the intended time again (lateness in it)."""
    stats = CanaryBoard()
    _late_requests(stats)
    (snap,) = stats.snapshot(200.0)
    assert snap.latency_sum / snap.latency_count == pytest.approx(ANSWER_AFTER_WAKE, abs=1e-9)
    assert snap.send_lateness_sum / snap.send_lateness_count == pytest.approx(LATE)


def test_the_breakdowns_network_time_holds_no_send_lateness() -> None:
    """Breaks if ``network_client`` takes the lateness as network (it would read 41 ms)."""
    stats = CanaryBoard()
    totals = canary_totals(stats, clock=lambda: 200.0)
    before = totals().get(("t", "m"), (0.0, 0))
    _late_requests(stats)
    seconds, count = totals()[("t", "m")]
    mean = (seconds - before[0]) / (count - before[1])
    breakdown = latency_breakdown(_rates(), mean)
    assert breakdown is not None and breakdown.network_client is not None
    assert breakdown.network_client == pytest.approx(ANSWER_AFTER_WAKE - SERVER_SECONDS, abs=1e-9)


def test_late_sends_do_not_make_the_advisor_call_the_model_network_bound() -> None:
    """Breaks if the advisor's client mean comes from latencies that carry the lateness:
    with it, 45 ms against 4 ms of server time is 91 % outside the server."""
    stats = CanaryBoard()
    _late_requests(stats)
    samples = stats.samples_between("t", "m", 0.0, 300.0)
    thresholds = AdvisorThresholds()
    as_measured = AdvisorInput(
        "t", "m", 0.05, client_mean_seconds=sum(samples) / len(samples),
        request_seconds=SERVER_SECONDS, protocol="http",
    )  # fmt: skip
    assert reduce_network_overhead(as_measured, thresholds) is None
    with_lateness = AdvisorInput(
        "t", "m", 0.05, client_mean_seconds=ANSWER_AFTER_WAKE + LATE,
        request_seconds=SERVER_SECONDS, protocol="http",
    )  # fmt: skip
    assert reduce_network_overhead(with_lateness, thresholds) is not None  # the rule can fire
