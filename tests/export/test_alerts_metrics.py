"""SLO, recommendation and alert-delivery metrics: names, values, and promtool's approval."""

from __future__ import annotations

import subprocess
from types import MappingProxyType

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from support import sample_value
from tritonwatch.analysis.advisor_records import Action, Recommendation
from tritonwatch.analysis.slo import WINDOWS, Severity, SliSource, SLOKind, SLOSpec, SLOStatus
from tritonwatch.export.alert_queue import QueueStats
from tritonwatch.export.slo_metrics import AlertDeliveryCollector, SLOCollector

pytestmark = pytest.mark.real

SPEC = SLOSpec("t", "m", SLOKind.LATENCY, 0.95, 28 * 86400.0, 0.05)
OTHER = SLOSpec("t", "quiet", SLOKind.AVAILABILITY, 0.999, 28 * 86400.0)


def _exposition() -> str:
    ratios: dict[str, float | None] = dict.fromkeys(WINDOWS, 0.1)
    ratios["3d"] = None  # no events that far back: nothing exported
    status = SLOStatus(SPEC, SliSource.CANARY, ratios, 0.025, None)
    recommendation = Recommendation(
        target="t",
        model="m",
        action=Action.ADD_INSTANCE,
        parameter="instance_group.count",
        current=1,
        proposed=2,
        severity=Severity.INFO,
        reason="r",
        evidence=MappingProxyType({}),
        expected_effect="e",
        config_change=True,
    )
    registry = CollectorRegistry()
    registry.register(
        SLOCollector(lambda: [SPEC, OTHER], lambda: [status], lambda: [recommendation])
    )
    registry.register(AlertDeliveryCollector(lambda: [QueueStats("alertmanager", 3, 10, 1, 2, 4)]))
    return generate_latest(registry).decode()


def test_values_follow_the_design_names() -> None:
    """SLO, recommendation and delivery metrics have the design's names, labels and values."""
    text = _exposition()
    latency = [("target", "t"), ("model", "m"), ("slo", "latency")]
    assert sample_value(text, "tritonwatch_slo_objective_ratio", latency) == 0.95
    assert sample_value(text, "tritonwatch_slo_objective_ratio", [("model", "quiet")]) == 0.999
    burn = [*latency, ("window", "1h"), ("source", "canary")]
    assert sample_value(text, "tritonwatch_slo_burn_rate", burn) == 0.1 / (1 - 0.95)
    assert sample_value(text, "tritonwatch_slo_burn_rate", [("window", "3d")]) is None
    assert sample_value(text, "tritonwatch_slo_burn_rate", [("model", "quiet")]) is None
    remaining = sample_value(text, "tritonwatch_slo_error_budget_remaining_ratio", latency)
    assert remaining == 1 - 0.025 / (1 - 0.95)
    assert (
        sample_value(
            text,
            "tritonwatch_recommendation",
            [
                ("action", "add_instance"),
                ("parameter", "instance_group.count"),
                ("severity", "info"),
            ],
        )
        == 1.0
    )
    receiver = [("receiver", "alertmanager")]
    assert sample_value(text, "tritonwatch_alerts_queue_length", receiver) == 3
    assert sample_value(text, "tritonwatch_alerts_sent_total", receiver) == 10
    assert sample_value(text, "tritonwatch_alerts_dropped_total", receiver) == 1
    assert sample_value(text, "tritonwatch_alerts_rejected_total", receiver) == 2
    assert sample_value(text, "tritonwatch_alert_delivery_failures_total", receiver) == 4


def test_promtool_accepts_the_exposition() -> None:
    """promtool accepts the exposition of SLO, recommendation and alert metrics."""
    result = subprocess.run(
        ["promtool", "check", "metrics"],
        input=_exposition(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stdout + result.stderr
