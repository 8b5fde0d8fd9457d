"""A step's advice from a pipeline and from the step's own canary do not fight: each source
keeps its own, and what is shown (exported, alerted) is one per (target, model, action)
with at most one configuration change per model."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from structlog.testing import capture_logs

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
from tritonwatch.export.alerts import active_alerts, recommendation_alert
from tritonwatch.runtime.recommendation_board import RecommendationBoard


def _lower(model: str = "core", pipeline: str = "", proposed: int = 10_000) -> Recommendation:
    return Recommendation(
        target="t",
        model=model,
        action=Action.LOWER_QUEUE_DELAY,
        parameter="max_queue_delay_microseconds",
        current=20_000,
        proposed=proposed,
        severity=Severity.TICKET,
        reason=f"for {pipeline or model}",
        evidence=MappingProxyType({"queue_seconds": 0.02}),
        expected_effect="less waiting",
        config_change=True,
        pipeline=pipeline,
    )


def _add(model: str = "core") -> Recommendation:
    return replace(
        _lower(model),
        action=Action.ADD_INSTANCE,
        parameter="instance_group.count",
        current=1,
        proposed=2,
    )


def test_the_pipelines_step_advice_survives_the_steps_own_evaluation() -> None:
    """Breaks if core's own (empty) evaluation clears what pipeline found for core, or
    either source's update clears the other's."""
    board = RecommendationBoard()
    board.update("t", "pipeline", [_lower(pipeline="pipeline")])
    board.update("t", "core", [])
    assert [(r.model, r.pipeline) for r in board.active()] == [("core", "pipeline")]
    board.update("t", "core", [_lower()])  # core's own canary finds the same
    (shown,) = board.active()
    assert (shown.model, shown.pipeline) == ("core", "")  # its own evaluation wins
    board.update("t", "core", [])
    assert [r.pipeline for r in board.active()] == ["pipeline"]  # the pipeline's is back
    board.update("t", "pipeline", [])
    assert board.active() == []


def test_two_pipelines_sharing_a_step_show_one_recommendation() -> None:
    board = RecommendationBoard()
    board.update("t", "zeta", [_lower(pipeline="zeta")])
    board.update("t", "alpha", [_lower(pipeline="alpha")])
    assert [r.pipeline for r in board.active()] == ["alpha"]
    rows = board.by_model()  # each pipeline's row names the step's change in its words
    assert {key: [r.pipeline for r in rs] for key, rs in rows.items()} == {
        ("t", "core"): ["alpha"],
        ("t", "alpha"): ["alpha"],
        ("t", "zeta"): ["zeta"],
    }


def test_at_most_one_configuration_change_per_model_across_sources() -> None:
    """pipeline asks core to batch less, core's own canary to add an instance: the
    higher-priority change (the queue delay) is the one shown."""
    board = RecommendationBoard()
    board.update("t", "core", [_add()])
    board.update("t", "pipeline", [_lower(pipeline="pipeline")])
    assert [(r.action, r.pipeline) for r in board.active()] == [
        (Action.LOWER_QUEUE_DELAY, "pipeline")
    ]


def test_a_pipeline_removed_from_the_config_takes_its_step_advice_with_it() -> None:
    board = RecommendationBoard()
    board.update("t", "pipeline", [_lower(pipeline="pipeline")])
    board.retain([("t", "core")])
    assert board.active() == []


def test_log_lines_name_the_pipeline() -> None:
    board = RecommendationBoard()
    with capture_logs() as logs:
        board.update("t", "pipeline", [_lower(pipeline="pipeline")])
        board.update("t", "pipeline", [])
    assert [(e["event"], e["model"], e.get("pipeline")) for e in logs] == [
        ("recommendation", "core", "pipeline"),
        ("recommendation_cleared", "core", "pipeline"),
    ]


def test_the_alert_is_the_steps_and_names_the_pipeline() -> None:
    """Labels as any recommendation's (the step's: one alert per model and action);
    annotations name the pipeline whose SLO it serves."""
    alert = recommendation_alert(_lower(pipeline="pipeline"))
    assert dict(alert.labels) == {
        "alertname": "TritonTuningRecommendation",
        "severity": "ticket",
        "target": "t",
        "model": "core",
        "action": "lower_queue_delay",
    }
    assert alert.annotations["pipeline"] == "pipeline"
    assert alert.annotations["summary"].endswith("for pipeline's latency SLO")
    assert "pipeline" not in recommendation_alert(_lower()).annotations


def test_the_pipelines_burn_alert_proposes_its_steps_change() -> None:
    """The pipeline's SLO burns; the change that serves it is core's: its burn alert
    names it, with the step's name, and the step's own alert fires once."""
    spec = SLOSpec("t", "pipeline", SLOKind.LATENCY, 0.95, 28 * 86400.0, threshold_seconds=0.02)
    burning = SLOStatus(spec, SliSource.CANARY, dict.fromkeys(WINDOWS, 0.9), 0.0, BURN_POLICY[0])
    specs = active_alerts([burning], [_lower(pipeline="pipeline")])
    burn, step = specs
    assert (burn.labels["alertname"], burn.labels["model"]) == ("TritonSLOBurn", "pipeline")
    assert burn.annotations["proposed_change"] == (
        "core: max_queue_delay_microseconds: 20000 → 10000"
    )
    assert (step.labels["model"], step.annotations["pipeline"]) == ("core", "pipeline")
