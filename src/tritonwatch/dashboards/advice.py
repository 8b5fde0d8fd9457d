"""Dashboard (5), recommendations and experiments: the advisor's active recommendations,
the verdicts of configuration experiments, and the numbers they act on, with every
recommendation marked on the graphs."""

from __future__ import annotations

from tritonwatch.dashboards.panels import (
    BUDGET_LINE,
    Json,
    Query,
    Row,
    by_name,
    state_timeline,
    table,
    thresholds,
    timeseries,
    value_map,
)
from tritonwatch.dashboards.slo import BUDGET, canary_quantile
from tritonwatch.dashboards.variables import (
    budget_variable,
    dashboard,
    model_variable,
    prometheus_annotation,
    sel,
    target_variable,
    window_variable,
)

UID = "tritonwatch-advice"
TITLE = "tritonwatch / recommendations and experiments"

RECOMMENDATION = "tritonwatch_recommendation"
VERDICT = "tritonwatch_experiment_verdict"
_HIDE: Json = {"Time": True, "__name__": True, "job": True, "instance": True}


def _recommendations_row() -> Row:
    return Row(
        "Recommendations",
        (
            table(
                "Active recommendations",
                "What the advisor proposes now: at most one configuration change per model "
                "(the highest priority), plus advice that needs no change. Details, current "
                "and proposed values are in the TritonTuningRecommendation alert.",
                Query(f"{RECOMMENDATION}{sel()} == 1", instant=True, table=True),
                height=7,
                transformations=[
                    {
                        "id": "organize",
                        "options": {"excludeByName": {**_HIDE, "Value": True}},
                    }
                ],
            ),
            state_timeline(
                "Recommendation history",
                "When each recommendation was active.",
                Query(
                    "max by (target, model, action, parameter, severity) "
                    f"({RECOMMENDATION}{sel()})",
                    "{{target}}/{{model}} {{action}} {{parameter}} ({{severity}})",
                ),
                mappings=[value_map("1", "active", "orange")],
                steps=thresholds((None, "transparent"), (1, "orange")),
            ),
            table(
                "Recommendation alerts",
                "Triton alerts other than SLO burn (tuning recommendations, GPU underuse) "
                "that Prometheus holds now.",
                Query(
                    'ALERTS{alertname=~"Triton.*",alertname!="TritonSLOBurn"}',
                    instant=True,
                    table=True,
                ),
                height=6,
                transformations=[
                    {
                        "id": "organize",
                        "options": {"excludeByName": {**_HIDE, "Value": True}},
                    }
                ],
            ),
        ),
    )


def _experiments_row() -> Row:
    return Row(
        "Experiments",
        (
            table(
                "Latest experiment verdicts",
                "For each configuration change seen (or applied by tritonwatch tune): keep "
                "or revert, from a before and an after window under comparable load.",
                Query(f"{VERDICT}{sel()}", instant=True, table=True),
                width=10,
                transformations=[{"id": "organize", "options": {"excludeByName": _HIDE}}],
            ),
            state_timeline(
                "Verdicts over time",
                "When each verdict was reported.",
                Query(
                    f"max by (target, model, parameter, verdict) ({VERDICT}{sel()})",
                    "{{model}} {{parameter}}: {{verdict}}",
                ),
                width=14,
                height=8,
                steps=thresholds((None, "transparent"), (1, "blue")),
            ),
        ),
    )


def _effect_row() -> Row:
    return Row(
        "What the changes act on",
        (
            timeseries(
                "Canary p95 against the budget",
                "The latency a change should improve; recommendations are marked on the graph.",
                Query(canary_quantile("0.95"), "{{target}}/{{model}} p95"),
                BUDGET,
                unit="s",
                width=8,
                overrides=[by_name("budget", **BUDGET_LINE)],
            ),
            timeseries(
                "Throughput",
                "Inferences per second: a change must not buy latency with throughput.",
                Query(
                    f"tritonwatch_model_throughput_inferences_per_second{sel()}",
                    "{{target}}/{{model}}",
                ),
                unit="short",
                width=8,
            ),
            timeseries(
                "Operating point",
                "The best in-budget concurrency of each sweep.",
                Query(
                    f"tritonwatch_sweep_operating_point_concurrency{sel()}",
                    "{{target}}/{{model}}",
                ),
                unit="none",
                width=8,
            ),
        ),
    )


def build() -> Json:
    """The recommendations and experiments dashboard."""
    marks = prometheus_annotation(
        "Recommendations",
        f"{RECOMMENDATION}{sel()} == 1",
        "{{action}} {{parameter}}",
        "{{target}}/{{model}} ({{severity}})",
        "orange",
    )
    return dashboard(
        UID,
        TITLE,
        "The advisor's recommendations, the verdicts of configuration experiments, and "
        "the latency and throughput they act on.",
        [target_variable(), model_variable(), budget_variable(), window_variable()],
        [_recommendations_row(), _experiments_row(), _effect_row()],
        annotations=[marks],
    )
