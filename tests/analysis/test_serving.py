"""The verdicts behind TritonServerDown and TritonModelNotServing, from records alone."""

from __future__ import annotations

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
