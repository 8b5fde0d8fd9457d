"""The canary series' liveness record (when an outcome last came, the run of server
failures), the stalled verdict judged from it, and what /health and /metrics say."""

from __future__ import annotations

from tritonwatch.export.health import health_report
from tritonwatch.export.liveness_metrics import LivenessCollector
from tritonwatch.probe.canary.breaker import BREAKER_PROBE_SECONDS
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.model_canary import ModelCanary
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.records.observations import CanaryResult, Outcome
from tritonwatch.state.canary_board import CanaryBoard
from tritonwatch.state.canary_liveness import silent_for, stalled_canaries

KEY = ("t", "m", "http")
PLAN = CanaryPlan("t", "m", "", "http", "http://127.0.0.1:9", "", 1.0, False, 5.0, 1, "zero")


def _record(stats: CanaryBoard, outcome: Outcome, at: float) -> None:
    stats.record(CanaryResult("t", "m", "http", at, outcome, 0.01, "boom"))


def _snapshot(stats: CanaryBoard, now: float = 100.0):  # type: ignore[no-untyped-def]
    (only,) = stats.snapshot(now)
    return only


def test_a_new_series_has_no_outcome_and_no_failing_run() -> None:
    stats = CanaryBoard()
    stats.declare([KEY])
    snap = _snapshot(stats)
    assert (snap.last_outcome_at, snap.failing_since, snap.failures_in_row) == (None, None, 0)


def test_failures_start_a_run_that_a_success_ends() -> None:
    stats = CanaryBoard()
    stats.declare([KEY])
    _record(stats, Outcome.HTTP_ERROR, 10.0)
    _record(stats, Outcome.TIMEOUT, 11.0)
    _record(stats, Outcome.BAD_RESPONSE, 12.0)
    snap = _snapshot(stats)
    assert (snap.last_outcome_at, snap.failing_since, snap.failures_in_row) == (12.0, 10.0, 3)
    _record(stats, Outcome.SUCCESS, 13.0)
    snap = _snapshot(stats)
    assert (snap.last_outcome_at, snap.failing_since, snap.failures_in_row) == (13.0, None, 0)


def test_our_own_errors_neither_extend_nor_end_a_failing_run() -> None:
    stats = CanaryBoard()
    stats.declare([KEY])
    _record(stats, Outcome.HTTP_ERROR, 10.0)
    _record(stats, Outcome.CLIENT_ERROR, 11.0)
    snap = _snapshot(stats)
    assert (snap.last_outcome_at, snap.failing_since, snap.failures_in_row) == (11.0, 10.0, 1)
    stats2 = CanaryBoard()
    stats2.declare([KEY])
    _record(stats2, Outcome.CLIENT_ERROR, 5.0)
    snap = _snapshot(stats2)
    assert (snap.last_outcome_at, snap.failing_since, snap.failures_in_row) == (5.0, None, 0)


# -- stalled canaries ----------------------------------------------------------------------
class _Canary:
    """What liveness reads of a canary: sending since when, paused, how long it may be silent."""

    def __init__(self, sending_since: float | None, allowed: float = 8.0) -> None:
        self.sending_since = sending_since
        self.paused = False
        self.allowed = allowed

    def silence_allowed(self) -> float:
        return self.allowed


def _verdict(canary: _Canary, last_outcome: float | None, now: float) -> bool:
    stats = CanaryBoard()
    stats.declare([KEY])
    if last_outcome is not None:
        _record(stats, Outcome.SUCCESS, last_outcome)
    return stalled_canaries({KEY: canary}, stats.snapshot(now), now)[KEY]


def test_a_canary_silent_longer_than_allowed_is_stalled_and_not_before() -> None:
    """Breaks if a canary whose outcomes stopped is not flagged, or one is flagged early."""
    canary = _Canary(sending_since=10.0, allowed=8.0)
    assert _verdict(canary, last_outcome=100.0, now=108.0) is False
    assert _verdict(canary, last_outcome=100.0, now=108.5) is True


def test_a_canary_that_never_produced_an_outcome_counts_from_when_it_began_sending() -> None:
    """Breaks if a canary that sends but never hears back is never called stalled."""
    canary = _Canary(sending_since=50.0, allowed=8.0)
    assert _verdict(canary, last_outcome=None, now=57.0) is False
    assert _verdict(canary, last_outcome=None, now=59.0) is True


def test_canaries_not_sending_yet_or_paused_are_not_judged() -> None:
    """Breaks if a canary waiting for metadata (server down) or paused for a sweep reads
    as stalled: the readiness alert and the sweep explain their silence."""
    assert _verdict(_Canary(sending_since=None), last_outcome=None, now=1e6) is False
    paused = _Canary(sending_since=1.0)
    paused.paused = True
    assert _verdict(paused, last_outcome=2.0, now=1e6) is False


def test_an_open_breaker_allows_three_probe_periods_of_silence() -> None:
    """Breaks if a canary held back by its circuit breaker (one probe per 10 s) reads as
    stalled between probes."""
    canary = ModelCanary(PLAN, object(), CanaryBoard(), engine=CanaryEngine())  # type: ignore[arg-type]
    assert canary.silence_allowed() == 3 * (1.0 / PLAN.rate) + PLAN.timeout
    canary._gates.breaker._open_until = 0.0
    assert canary.silence_allowed() == 3 * BREAKER_PROBE_SECONDS + PLAN.timeout


def test_silence_counts_from_the_later_of_the_last_outcome_and_the_resume() -> None:
    """Breaks if a canary resumed after a pause is judged from an outcome before the
    pause, or silence is counted from anything but the later of the two."""
    stats = CanaryBoard()
    stats.declare([KEY])
    _record(stats, Outcome.SUCCESS, 100.0)
    (snapshot,) = stats.snapshot(203.0)
    assert silent_for(_Canary(sending_since=200.0), snapshot, 203.0) == 3.0  # resumed at 200
    assert silent_for(_Canary(sending_since=50.0), snapshot, 203.0) == 103.0


def test_silence_is_never_negative_and_zero_at_the_last_outcome() -> None:
    """Breaks if a canary that just produced reads as silent for any time, or a clock
    read just before its outcome gives a negative silence."""
    stats = CanaryBoard()
    stats.declare([KEY])
    _record(stats, Outcome.SUCCESS, 100.0)
    (snapshot,) = stats.snapshot(100.0)
    canary = _Canary(sending_since=10.0)
    assert silent_for(canary, snapshot, 100.0) == 0.0
    assert silent_for(canary, snapshot, 99.5) == 0.0
    assert silent_for(canary, None, 10.25) == 0.25  # no series yet: since it began sending


def test_a_canary_whose_series_is_not_on_the_board_is_judged_from_its_start() -> None:
    """Breaks if a canary with no snapshot at all (its series not declared yet) is never
    judged, or breaks the verdict of every canary."""
    canary = _Canary(sending_since=50.0, allowed=8.0)
    assert stalled_canaries({KEY: canary}, [], now=58.0) == {KEY: False}
    assert stalled_canaries({KEY: canary}, [], now=58.5) == {KEY: True}


# -- /health -----------------------------------------------------------------------------
def test_a_stalled_canary_makes_health_503_and_names_it() -> None:
    """Breaks if /health stays green while a canary has gone silent."""
    report = health_report("started", started=True, late=[], jobs=1, stalled=[KEY])
    assert report.healthy is False
    assert report.details["status"] == "degraded"
    assert report.details["stalled_canaries"] == [{"target": "t", "model": "m", "protocol": "http"}]


def test_an_engine_that_restarted_itself_is_degraded_but_live() -> None:
    """Breaks if a recovered engine crash is hidden (healthy) or kills the pod (503)."""
    report = health_report(
        "started", started=True, late=[], jobs=1, engine_restarts=2, engine_recovering=True
    )
    assert report.healthy is True
    assert report.details["status"] == "degraded"
    assert report.details["canary_engine_restarts"] == 2
    assert health_report("started", started=True, late=[], jobs=1).details["status"] == "healthy"


def test_liveness_metrics_carry_every_canarys_verdict_and_the_restarts() -> None:
    """Breaks if the stalled gauge or the restart counter leave the exposition."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    stalled = {KEY: True, ("t", "n", "grpc"): False}
    registry.register(LivenessCollector(lambda: stalled, lambda: 3))
    text = generate_latest(registry).decode()
    assert 'tritonwatch_canary_stalled{model="m",protocol="http",target="t"} 1.0' in text
    assert 'tritonwatch_canary_stalled{model="n",protocol="grpc",target="t"} 0.0' in text
    assert "tritonwatch_canary_engine_restarts_total 3.0" in text
