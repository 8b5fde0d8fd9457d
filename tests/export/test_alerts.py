"""Alert label sets and Prometheus' re-send contract, driven by a fake clock."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from tritonwatch.analysis.advisor_records import Action, Recommendation
from tritonwatch.analysis.slo import (
    BURN_POLICY,
    WINDOWS,
    Severity,
    SliSource,
    SLOKind,
    SLOSpec,
    SLOStatus,
)
from tritonwatch.export.alerts import (
    GPU_UNDERUSED,
    SLO_BURN,
    TUNING_RECOMMENDATION,
    AlertBoard,
    AlertSpec,
    active_alerts,
    fingerprint,
    recommendation_alert,
    rfc3339,
    slo_burn_alert,
)

T0 = 1_700_000_000.0


def _spec(name: str = "a", text: str = "first") -> AlertSpec:
    return AlertSpec(
        MappingProxyType({"alertname": name, "model": "m"}), MappingProxyType({"summary": text})
    )


def test_firing_alert_is_sent_at_once_then_every_resend_interval() -> None:
    """A firing alert is sent at once, then only every resend interval, with ends_at moved on."""
    board = AlertBoard(evaluation_interval=15.0, resend_interval=60.0)
    (first,) = board.update([_spec()], now=T0)
    assert (first.starts_at, first.ends_at, first.resolved) == (T0, T0 + 240.0, False)
    for seconds in (15, 30, 45):
        assert board.update([_spec()], now=T0 + seconds) == []
    (again,) = board.update([_spec(text="now")], now=T0 + 60)
    assert (again.starts_at, again.ends_at) == (T0, T0 + 300.0)
    assert again.annotations["summary"] == "now"


def test_ends_at_covers_four_evaluations_when_they_are_slower_than_resends() -> None:
    """With evaluations slower than resends, ends_at covers four evaluations, not resends."""
    board = AlertBoard(evaluation_interval=120.0, resend_interval=60.0)
    (alert,) = board.update([_spec()], now=T0)
    assert alert.ends_at == T0 + 480.0


def test_resolved_alert_is_sent_at_once_and_repeated_for_15_minutes() -> None:
    """A resolved alert is sent at once, then once a minute for 15 minutes, then forgotten."""
    board = AlertBoard(evaluation_interval=15.0, resend_interval=60.0)
    board.update([_spec()], now=T0)
    (resolved,) = board.update([], now=T0 + 30)
    assert (resolved.resolved, resolved.ends_at, resolved.starts_at) == (True, T0 + 30, T0)
    sends = [board.update([], now=T0 + 30 + s) for s in range(15, 16 * 60, 15)]
    resent = [alerts[0].ends_at for alerts in sends if alerts]
    assert resent == [T0 + 30] * 15  # one a minute until 15 minutes have passed
    assert board.firing() == []
    assert board.update([], now=T0 + 3600) == []


def test_an_alert_that_fires_again_starts_anew() -> None:
    """An alert that fires again after resolving gets a new start time."""
    board = AlertBoard()
    board.update([_spec()], now=T0)
    board.update([], now=T0 + 60)
    (again,) = board.update([_spec()], now=T0 + 120)
    assert (again.starts_at, again.resolved) == (T0 + 120, False)


def test_alerts_are_told_apart_by_labels_only() -> None:
    """Alerts are told apart by labels: new annotation text alone is no new alert."""
    board = AlertBoard()
    sent = board.update([_spec("a"), _spec("b")], now=T0)
    assert {a.labels["alertname"] for a in sent} == {"a", "b"}
    assert len(board.update([_spec("a", "other text"), _spec("b")], now=T0 + 1)) == 0
    assert [s.labels["alertname"] for s in board.firing()] == ["a", "b"]


def test_api_body_is_alertmanagers_postable_alert() -> None:
    """The body is Alertmanager's postable alert, with millisecond RFC 3339 times."""
    board = AlertBoard(generator_url="http://daemon:9849/")
    (alert,) = board.update([_spec()], now=T0 + 0.25)
    assert alert.to_api() == {
        "labels": {"alertname": "a", "model": "m"},
        "annotations": {"summary": "first"},
        "startsAt": "2023-11-14T22:13:20.250Z",
        "endsAt": "2023-11-14T22:17:20.250Z",
        "generatorURL": "http://daemon:9849/",
    }
    assert "generatorURL" not in AlertBoard().update([_spec()], now=T0)[0].to_api()
    assert rfc3339(0) == "1970-01-01T00:00:00.000Z"


def test_fingerprint_is_fnv1a_over_sorted_labels() -> None:
    """Fingerprints are FNV-1a over sorted labels, so label order and boundaries count right."""
    assert fingerprint({}) == "cbf29ce484222325"  # the FNV-1a 64 offset basis
    assert fingerprint({"b": "2", "a": "1"}) == fingerprint({"a": "1", "b": "2"})
    assert fingerprint({"a": "1b"}) != fingerprint({"a1": "b"})


def _recommendation(action: Action, config_change: bool = True) -> Recommendation:
    return Recommendation(
        target="t",
        model="m",
        action=action,
        parameter="max_queue_delay_microseconds",
        current=80_000,
        proposed=40_000,
        severity=Severity.TICKET,
        reason="p95 85.0 ms is over the 50.0 ms budget",
        evidence=MappingProxyType({"p95_seconds": 0.085, "queue_share": 0.9}),
        expected_effect="requests wait up to 40.0 ms less",
        config_change=config_change,
    )


def test_recommendation_alert_carries_values_evidence_and_runbook() -> None:
    """A recommendation alert has its labels, values, evidence, runbook link and summary."""
    alert = recommendation_alert(_recommendation(Action.LOWER_QUEUE_DELAY))
    assert dict(alert.labels) == {
        "alertname": TUNING_RECOMMENDATION,
        "severity": "ticket",
        "target": "t",
        "model": "m",
        "action": "lower_queue_delay",
    }
    notes = alert.annotations
    assert notes["proposed_change"] == "max_queue_delay_microseconds: 80000 → 40000"
    assert (notes["current_value"], notes["proposed_value"]) == ("80000", "40000")
    assert "p95_seconds=0.085, queue_share=0.9" in notes["description"]
    assert notes["runbook_url"] == "docs/runbook.md#lower_queue_delay"
    assert notes["summary"] == "m on t: lower_queue_delay (change)"


def test_gpu_underuse_has_its_own_alert_name() -> None:
    """Add-instance advice is sent under the GPU-underused alert name."""
    alert = recommendation_alert(_recommendation(Action.ADD_INSTANCE))
    assert alert.labels["alertname"] == GPU_UNDERUSED


def _status(firing: bool) -> SLOStatus:
    spec = SLOSpec("t", "m", SLOKind.AVAILABILITY, 0.999, 28 * 86400.0)
    ratios: dict[str, float | None] = dict.fromkeys(WINDOWS, 0.02)
    return SLOStatus(spec, SliSource.SERVER, ratios, 0.0005, BURN_POLICY[0] if firing else None)


def test_slo_burn_alert_names_the_numbers_and_the_models_change() -> None:
    """A burn alert names burn rates, limit, source and budget, and the model's config change."""
    change = _recommendation(Action.LOWER_QUEUE_DELAY)
    advice = _recommendation(Action.OPTIMIZE_MODEL, config_change=False)
    alert = slo_burn_alert(_status(True), [advice, change])
    assert alert is not None
    assert dict(alert.labels) == {
        "alertname": SLO_BURN,
        "severity": "page",
        "target": "t",
        "model": "m",
        "slo": "availability",
        "source": "server",
    }
    assert alert.annotations["description"] == (
        "Burn rate 20.0× over 1h and 20.0× over 5m (limit 14.4×, server events, objective "
        "0.999); error budget remaining over the period: 50.0%."
    )
    assert alert.annotations["proposed_change"] == change.proposed_change
    assert slo_burn_alert(_status(False)) is None


def test_active_alerts_joins_burns_and_recommendations() -> None:
    """Active alerts are firing burns then recommendations, a burn carrying the change."""
    specs = active_alerts(
        [_status(True), _status(False)], [_recommendation(Action.LOWER_QUEUE_DELAY)]
    )
    assert [s.labels["alertname"] for s in specs] == [SLO_BURN, TUNING_RECOMMENDATION]
    assert specs[0].annotations["proposed_change"].startswith("max_queue_delay")


@pytest.mark.parametrize("severity", [Severity.PAGE, Severity.TICKET])
def test_burn_severity_follows_the_condition(severity: Severity) -> None:
    """A burn alert's severity is its condition's, and an unknown budget says unknown."""
    condition = next(c for c in BURN_POLICY if c.severity == severity)
    status = _status(True)
    status = SLOStatus(status.spec, status.source, status.error_ratios, None, condition)
    alert = slo_burn_alert(status)
    assert alert is not None
    assert alert.labels["severity"] == str(severity)
    assert "remaining over the period: unknown" in alert.annotations["description"]
