"""The verdicts behind TritonServerDown and TritonModelNotServing, from records alone."""

from __future__ import annotations

from dataclasses import replace

from tritonwatch.analysis.serving import down_since, not_serving, servers_down
from tritonwatch.records.observations import Outcome, ReadinessObservation
from tritonwatch.state.canary_board import LastError, SeriesSnapshot


def _series(
    protocol: str, failing_since: float | None, failures: int, last_at: float | None = 100.0
) -> SeriesSnapshot:
    error = LastError("http_error", f"[500] via {protocol}", 90.0 + len(protocol), 0.0)  # http last
    return SeriesSnapshot(
        "t", "m", protocol, {}, (), 0.0, 0, {}, last_error=error, last_outcome_at=last_at,
        failing_since=failing_since, failures_in_row=failures,
    )  # fmt: skip


def _ready(ready: bool, at: float = 0.0) -> dict[str, ReadinessObservation]:
    outcome = Outcome.SUCCESS if ready else Outcome.CONNECTION_ERROR
    return {"t": ReadinessObservation("t", at, outcome, ready, 0.001)}


def test_every_series_must_have_failed_for_the_hold() -> None:
    """Breaks if one protocol still succeeding, or a run younger than 60 s, still reads
    as not serving; or if the verdict's count and last error are not the model's."""
    both = [_series("http", 10.0, 40), _series("grpc", 30.0, 20)]
    (verdict,) = not_serving(both, _ready(True), now=90.0)
    assert (verdict.failing_since, verdict.failing_seconds, verdict.failed) == (10.0, 80.0, 60)
    assert verdict.last_error is not None and verdict.last_error.error == "[500] via http"
    assert not_serving(both, _ready(True), now=89.0) == []  # grpc's run is 59 s old
    one_ok = [_series("http", 10.0, 40), _series("grpc", None, 0)]
    assert not_serving(one_ok, _ready(True), now=500.0) == []


def test_a_series_without_outcomes_says_nothing_and_a_down_server_is_not_asked() -> None:
    """Breaks if a canary that has sent nothing yet vetoes the verdict, or a model of a
    server that is not ready (or not checked yet) is called not serving."""
    quiet = [_series("http", 10.0, 40), _series("grpc", None, 0, last_at=None)]
    assert len(not_serving(quiet, _ready(True), now=90.0)) == 1
    assert not_serving(quiet, _ready(False), now=90.0) == []
    assert not_serving(quiet, {}, now=90.0) == []


def test_down_since_keeps_the_first_not_ready_reading_until_ready() -> None:
    """Breaks if later not-ready readings move the start of a run, or a ready one does
    not end it; servers_down waits the full hold."""
    first = down_since({}, _ready(False, at=10.0))
    later = down_since(first, _ready(False, at=40.0))
    assert later == {"t": 10.0}
    assert [d.target for d in servers_down(later, _ready(False, at=40.0), now=70.0)] == ["t"]
    assert servers_down(later, _ready(False, at=40.0), now=69.9) == []
    assert down_since(later, _ready(True, at=45.0)) == {}


def _failing(protocol: str, since: float, failures: int, error: LastError | None) -> SeriesSnapshot:
    """A series in a run of ``failures`` server failures since ``since``."""
    return SeriesSnapshot(
        target="t",
        model="m",
        protocol=protocol,
        outcomes={},
        bucket_counts=(),
        latency_sum=0.0,
        latency_count=0,
        window_quantiles={},
        last_error=error,
        last_outcome_at=100.0,
        failing_since=since,
        failures_in_row=failures,
    )


def test_a_down_server_is_reported_with_the_start_of_its_run_and_its_latest_reading() -> None:
    """Breaks if TritonServerDown loses when the server went down or its latest reading,
    or reports a target the readiness check no longer watches."""
    readiness = _ready(False, at=40.0)
    (down,) = servers_down({"t": 10.0, "gone": 5.0}, readiness, now=70.0)
    assert (down.target, down.since, down.latest) == ("t", 10.0, readiness["t"])


def test_the_last_error_is_the_most_recent_of_any_series() -> None:
    """Breaks if the verdict names an older failure than the model's latest, wherever its
    series comes in the snapshots."""
    older = LastError("http_error", "[500] older", 50.0, 0.0)
    newer = LastError("grpc_error", "[StatusCode.INTERNAL] newer", 80.0, 0.0)
    series = [_failing("http", 10.0, 5, older), _failing("grpc", 20.0, 5, newer)]
    (verdict,) = not_serving(series, _ready(True), now=90.0)
    assert verdict.last_error == newer
    (verdict,) = not_serving(series[::-1], _ready(True), now=90.0)
    assert verdict.last_error == newer


def test_one_failure_held_for_the_whole_hold_is_not_serving() -> None:
    """Breaks if a model whose single request in a row has failed for a minute (a canary
    at one request a minute, or a hung request) is not reported, and reports its numbers."""
    (verdict,) = not_serving([_failing("http", 10.0, 1, None)], _ready(True), now=70.0)
    assert (verdict.target, verdict.model) == ("t", "m")
    assert (verdict.failing_since, verdict.failing_seconds, verdict.failed) == (10.0, 60.0, 1)
    assert verdict.last_error is None  # no failure text recorded: none is made up
    assert not_serving([_failing("http", 10.0, 1, None)], _ready(True), now=69.9) == []


def test_a_model_passed_over_does_not_hide_the_models_after_it() -> None:
    """Breaks if a model of a down server, or one still succeeding, ends the search
    instead of being skipped: the failing model after it must still be reported."""
    ok = replace(_failing("http", 10.0, 0, None), model="ok", failing_since=None)
    on_down = replace(_failing("http", 10.0, 5, None), target="down")
    failing = _failing("http", 10.0, 5, None)
    readiness = {
        **_ready(True),
        "down": ReadinessObservation("down", 0.0, Outcome.TIMEOUT, False, 1.0),
    }
    verdicts = not_serving([ok, on_down, failing], readiness, now=90.0)
    assert [(v.target, v.model) for v in verdicts] == [("t", "m")]
