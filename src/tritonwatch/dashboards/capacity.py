"""Dashboard (4), capacity: each model's capacity against its load, headroom, the load's
trend, desired replicas and cost (:mod:`~tritonwatch.dashboards.capacity_headroom`, the
first row); then the last scheduled sweep's throughput and p95 at each concurrency, its
knee and operating point, and how they moved from sweep to sweep."""

from __future__ import annotations

from tritonwatch.dashboards import capacity_headroom
from tritonwatch.dashboards.panels import (
    Json,
    Query,
    Row,
    barchart,
    by_name,
    stat,
    table,
    thresholds,
    timeseries,
)
from tritonwatch.dashboards.variables import (
    budget_variable,
    dashboard,
    model_variable,
    sel,
    target_variable,
)

UID = "tritonwatch-capacity"
TITLE = "tritonwatch / capacity"

THROUGHPUT = "tritonwatch_sweep_throughput_inferences_per_second"
LATENCY = "tritonwatch_sweep_latency_seconds"
PER_LEVEL = "max by (target, model, concurrency)"
"""Both sides of a merged table need the same label columns, and no ``__name__``."""


def _level(expr: str) -> Query:
    """An instant table query, one row per sweep level."""
    return Query(f"{PER_LEVEL} ({expr})", instant=True, table=True)


def _quantile(quantile: str) -> str:
    return LATENCY + sel(f'quantile="{quantile}"')


def _by_concurrency(renames: dict[str, str]) -> list[Json]:
    """Merge the queries into one table, sort its rows by concurrency as a number, and
    name the value columns; concurrency stays a string so a bar chart can use it as x."""
    hide = {"Time": True, "target": True, "model": True}
    return [
        {"id": "merge", "options": {}},
        {
            "id": "convertFieldType",
            "options": {
                "conversions": [{"targetField": "concurrency", "destinationType": "number"}],
                "fields": {},
            },
        },
        {"id": "sortBy", "options": {"sort": [{"field": "concurrency", "desc": False}]}},
        {
            "id": "convertFieldType",
            "options": {
                "conversions": [{"targetField": "concurrency", "destinationType": "string"}],
                "fields": {},
            },
        },
        {"id": "organize", "options": {"excludeByName": hide, "renameByName": renames}},
    ]


def _summary_row() -> Row:
    within = (
        f"max by (target, model) ({THROUGHPUT}{sel()} and on (target, model, concurrency) "
        f"({_quantile('0.95')} <= $budget))"
    )
    return Row(
        "Last sweep",
        (
            stat(
                "Knee",
                "The concurrency after which more requests in flight stop adding "
                "meaningful throughput (tritonwatch_sweep_knee_concurrency).",
                Query(f"tritonwatch_sweep_knee_concurrency{sel()}", "{{target}}/{{model}}"),
                unit="none",
                steps=thresholds((None, "blue")),
            ),
            stat(
                "Operating point",
                "The concurrency with the best throughput whose p95 stays within the "
                "model's latency budget (tritonwatch_sweep_operating_point_concurrency).",
                Query(
                    f"tritonwatch_sweep_operating_point_concurrency{sel()}",
                    "{{target}}/{{model}}",
                ),
                unit="none",
                steps=thresholds((None, "green")),
            ),
            stat(
                "Best throughput within the budget",
                "The highest inferences/s of the last sweep at a level whose p95 is within "
                "the budget variable.",
                Query(within, "{{target}}/{{model}}"),
                unit="short",
                steps=thresholds((None, "green")),
            ),
            stat(
                "Last sweep finished",
                "When the last scheduled sweep of the model finished.",
                Query(
                    f"tritonwatch_sweep_last_run_timestamp_seconds{sel()} * 1000",
                    "{{target}}/{{model}}",
                ),
                unit="dateTimeFromNow",
                steps=thresholds((None, "text")),
            ),
        ),
    )


def _curve_row() -> Row:
    p95_share = f"{PER_LEVEL} ({_quantile('0.95')}) / $budget"
    return Row(
        "Throughput and latency per concurrency",
        (
            barchart(
                "Throughput and p95 per concurrency (last sweep)",
                "Inferences/s (bars, left axis) and p95 (right axis) at each concurrency "
                "of the last sweep. Pick one model: each level is one bar group.",
                _level(f"{THROUGHPUT}{sel()}"),
                _level(_quantile("0.95")),
                x_field="concurrency",
                unit="short",
                width=14,
                height=10,
                transformations=_by_concurrency({"Value #A": "inferences/s", "Value #B": "p95"}),
                overrides=[by_name("p95", unit="s", **{"custom.axisPlacement": "right"})],
            ),
            table(
                "Every level of the last sweep",
                "Throughput and latency quantiles per concurrency; 'budget used' is p95 "
                "over the budget variable (above 100 %: over budget).",
                _level(f"{THROUGHPUT}{sel()}"),
                _level(_quantile("0.5")),
                _level(_quantile("0.95")),
                _level(_quantile("0.99")),
                Query(p95_share, instant=True, table=True),
                width=10,
                height=10,
                transformations=_by_concurrency(
                    {
                        "Value #A": "inferences/s",
                        "Value #B": "p50",
                        "Value #C": "p95",
                        "Value #D": "p99",
                        "Value #E": "budget used",
                    }
                ),
                overrides=[
                    by_name("p50", unit="s"),
                    by_name("p95", unit="s"),
                    by_name("p99", unit="s"),
                    by_name(
                        "budget used",
                        unit="percentunit",
                        thresholds=thresholds((None, "green"), (0.8, "orange"), (1, "red")),
                        **{"custom.cellOptions": {"type": "color-background"}},
                    ),
                ],
            ),
        ),
    )


def _history_row() -> Row:
    return Row(
        "From sweep to sweep",
        (
            timeseries(
                "Throughput per concurrency over time",
                "Each sweep level's throughput as sweeps repeat: a configuration change "
                "shows as a step.",
                Query(f"{THROUGHPUT}{sel()}", "{{model}} c={{concurrency}}"),
                unit="short",
            ),
            timeseries(
                "Knee and operating point over time",
                "How the knee and the operating point moved from sweep to sweep.",
                Query(f"tritonwatch_sweep_knee_concurrency{sel()}", "{{model}} knee"),
                Query(
                    f"tritonwatch_sweep_operating_point_concurrency{sel()}",
                    "{{model}} operating point",
                ),
                unit="none",
            ),
        ),
    )


def build() -> Json:
    """The capacity dashboard."""
    return dashboard(
        UID,
        TITLE,
        "Each model's load against its capacity: headroom, time to exhaustion, desired "
        "replicas and cost; then the last scheduled sweep of each model: throughput and "
        "p95 per concurrency, knee and operating point, and their history.",
        [
            target_variable(multi=False),
            model_variable("tritonwatch_sweep_last_run_timestamp_seconds", multi=False),
            budget_variable(),
            capacity_headroom.horizon_variable(),
        ],
        [capacity_headroom.row(), _summary_row(), _curve_row(), _history_row()],
    )
