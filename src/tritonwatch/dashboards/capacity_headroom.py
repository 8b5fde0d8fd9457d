"""The capacity dashboard's first row, "Capacity and headroom": each model's load against
the capacity its last sweep measured, the load's trend carried forward, headroom, time
to exhaustion, staleness, desired replicas and cost (docs/guides/capacity.md).

The forecast line is the daemon's own trend, ``load + slope × $horizon``, not
``predict_linear(load[1h], …)`` over Prometheus's samples: the daemon fits the slope over
``capacity.trend_window``, a setting no series carries and a query would have to
hard-code, and it is the slope behind the time-to-exhaustion stat beside it, so the
graph and the stat agree whatever the config says. The line starts from the last load
sample where the daemon's forecast starts from the fitted line: they differ by the
load's noise, not its trend. The horizon is the ``horizon`` text box (seconds; 4 h by
default, as ``capacity.forecast_horizon``). The line crossing the capacity is the
forecast half of the ``TritonCapacityExhaustion`` ticket.

The metric names and the config defaults repeat those of
``export/capacity_metrics.py`` and ``config/capacity_schema.py``: the dashboards import
neither layer (pyproject's import contracts), and
``tests/deploy/test_capacity_dashboard.py`` holds them equal.
"""

from __future__ import annotations

from tritonwatch.dashboards.panels import (
    BUDGET_LINE,
    Json,
    Panel,
    Query,
    Row,
    by_query,
    stat,
    thresholds,
    timeseries,
    value_map,
)
from tritonwatch.dashboards.variables import sel, textbox_variable

CAPACITY = "tritonwatch_capacity_inferences_per_second"
CLOSED_LOOP = "tritonwatch_capacity_closed_loop_inferences_per_second"
CAPACITY_AGE = "tritonwatch_capacity_age_seconds"
LOAD = "tritonwatch_capacity_load_inferences_per_second"
CANARY_LOAD = "tritonwatch_capacity_canary_requests_per_second"
HEADROOM = "tritonwatch_capacity_headroom_ratio"
EXHAUSTION = "tritonwatch_capacity_exhaustion_seconds"
TREND = "tritonwatch_capacity_load_trend_inferences_per_second_per_second"
STALE = "tritonwatch_capacity_stale"
DRIFT = "tritonwatch_capacity_compute_drift_ratio"
DESIRED = "tritonwatch_desired_replicas"
COST = "tritonwatch_cost_per_1k_inferences"
GPU_SECONDS = "tritonwatch_gpu_seconds_per_1k_inferences"

HEADROOM_ALERT = 0.2
"""``capacity.headroom_alert``'s default: under it the headroom stat turns red."""
FORECAST_HORIZON = 4 * 3600
"""``capacity.forecast_horizon``'s default (seconds): the ``horizon`` box's value, and
under it the time-to-exhaustion stat turns red."""
STALE_DRIFT = 0.2
"""``capacity.stale_drift``'s default: past it either way the capacity goes stale."""
DAY = 24 * 3600
"""A capacity older than this predates the day's traffic: its age turns orange."""

LEGEND = "{{target}}/{{model}}"
DASHED = {"custom.lineStyle": {"fill": "dash", "dash": [10, 10]}, "custom.fillOpacity": 0}
DOTTED = {"custom.lineStyle": {"fill": "dot"}, "custom.fillOpacity": 0}
HEADROOM_STEPS = thresholds(
    (None, "red"), (HEADROOM_ALERT, "yellow"), (2 * HEADROOM_ALERT, "green")
)
"""Red under ``capacity.headroom_alert``, yellow under twice it, green above."""


def horizon_variable() -> Json:
    """The ``horizon`` text box: seconds the forecast carries the load's trend ahead."""
    return textbox_variable(
        "horizon",
        "Forecast horizon (s)",
        str(FORECAST_HORIZON),
        "How far ahead the load's trend is carried in the load and capacity graph "
        "(capacity.forecast_horizon in the tritonwatch config; 4h by default).",
    )


def _model(metric: str, *matchers: str) -> str:
    return metric + sel(*matchers)


def _stats() -> tuple[Panel, ...]:
    return (
        stat(
            "Headroom",
            "1 - load / capacity (tritonwatch_capacity_headroom_ratio): the share of the "
            "measured capacity still unused; negative past capacity. Red under the "
            "default capacity.headroom_alert (20 %), yellow under twice it.",
            Query(_model(HEADROOM), LEGEND),
            unit="percentunit",
            width=4,
            steps=HEADROOM_STEPS,
        ),
        stat(
            "Time to exhaustion",
            "When the load's least-squares trend reaches capacity "
            "(tritonwatch_capacity_exhaustion_seconds): 0 at or past it, 'never' when the "
            "trend is flat or falling (+Inf). Red within the default forecast horizon (4h).",
            Query(_model(EXHAUSTION), LEGEND),
            unit="s",
            width=4,
            steps=thresholds((None, "red"), (FORECAST_HORIZON, "yellow"), (DAY, "green")),
            # Grafana looks a value mapping up by the value as a JavaScript string: +Inf
            # arrives as Infinity.
            mappings=[value_map("Infinity", "never", "green")],
        ),
        stat(
            "Capacity age",
            "Time since the sweep the capacity comes from finished "
            "(tritonwatch_capacity_age_seconds); orange past a day.",
            Query(_model(CAPACITY_AGE), LEGEND),
            unit="s",
            width=4,
            steps=thresholds((None, "green"), (DAY, "orange")),
        ),
        stat(
            "Capacity stale",
            "Whether the live per-request compute time drifted from the sweep's at the "
            "same load past capacity.stale_drift (tritonwatch_capacity_stale); a stale "
            "capacity brings the model's next scheduled sweep forward.",
            Query(_model(STALE), LEGEND),
            unit="none",
            width=4,
            steps=thresholds((None, "green"), (1, "red")),
            mappings=[value_map("0", "ok", "green"), value_map("1", "stale", "red")],
        ),
        stat(
            "Compute drift",
            "Live per-request compute time over the sweep's at the same load, minus 1 "
            "(tritonwatch_capacity_compute_drift_ratio). Red past the default "
            "capacity.stale_drift (20 %) either way.",
            Query(_model(DRIFT), LEGEND),
            unit="percentunit",
            width=4,
            steps=thresholds((None, "red"), (-STALE_DRIFT, "green"), (STALE_DRIFT, "red")),
        ),
        stat(
            "Canary share of the load",
            "The canary's requests/s over the load's inferences/s: how much of the load "
            "tritonwatch adds itself (one inference per request at batch size 1).",
            Query(f"{_model(CANARY_LOAD)} / {_model(LOAD)}", LEGEND),
            unit="percentunit",
            width=4,
            steps=thresholds((None, "blue")),
        ),
    )


def _load_and_capacity() -> Panel:
    forecast = f"{_model(LOAD)} + {_model(TREND)} * $horizon"
    return timeseries(
        "Load and capacity",
        "Inferences/s Triton did (load; the canary's requests/s drawn apart) against the "
        "capacity of the last sweep (red dashed: the open-loop check's figure once checked; "
        "the closed-loop one dotted). The orange dashed line is the load carried $horizon "
        "seconds ahead on the trend the daemon fits over capacity.trend_window: where it "
        "crosses the capacity, the load is forecast to reach it within the horizon.",
        Query(_model(CAPACITY), "capacity"),
        Query(_model(CLOSED_LOOP), "closed-loop capacity"),
        Query(_model(LOAD), "load"),
        Query(forecast, "load in $horizon s (trend)"),
        Query(_model(CANARY_LOAD), "canary requests/s"),
        unit="short",
        width=16,
        height=9,
        overrides=[
            by_query("A", BUDGET_LINE),
            by_query("B", DOTTED),
            by_query("D", {**DASHED, "color": {"mode": "fixed", "fixedColor": "orange"}}),
        ],
    )


def _desired_replicas() -> Panel:
    return timeseries(
        "Desired replicas",
        "Replicas each service needs for the selected model's load: ceil(load over the "
        "service's targets / (capacity x capacity.target_utilisation)) + spare replicas "
        "(tritonwatch_desired_replicas; one line per service, every service shown).",
        Query(f'{DESIRED}{{model=~"$model"}}', "{{service}}"),
        unit="none",
        width=8,
        height=9,
    )


def _headroom_history() -> Panel:
    return timeseries(
        "Headroom over time",
        "1 - load / capacity; the dashed lines are the default capacity.headroom_alert "
        "(20 %) and twice it.",
        Query(_model(HEADROOM), LEGEND),
        unit="percentunit",
        width=8,
        minimum=None,
        threshold_lines=HEADROOM_STEPS,
    )


def _cost() -> tuple[Panel, ...]:
    return (
        timeseries(
            "Cost per 1000 inferences",
            "At today's load (the model's share of the target's compute time over its "
            "load) and at capacity (the whole target over the capacity), in the currency "
            "of the target's price (tritonwatch_cost_per_1k_inferences); empty for a "
            "target without a price.",
            Query(_model(COST, 'at="load"'), "{{model}} at load"),
            Query(_model(COST, 'at="capacity"'), "{{model}} at capacity"),
            unit="short",
            width=8,
        ),
        timeseries(
            "GPU-seconds per 1000 inferences",
            "The same two figures in GPU-seconds, for a target without a price "
            "(tritonwatch_gpu_seconds_per_1k_inferences): the target's GPUs (at load, the "
            "model's share of them) times the seconds 1000 inferences take.",
            Query(_model(GPU_SECONDS, 'at="load"'), "{{model}} at load"),
            Query(_model(GPU_SECONDS, 'at="capacity"'), "{{model}} at capacity"),
            unit="s",
            width=8,
        ),
    )


def row() -> Row:
    """The "Capacity and headroom" row: six stats, then load against capacity beside the
    desired replicas, then headroom over time beside the cost and GPU-seconds per 1000
    inferences."""
    return Row(
        "Capacity and headroom",
        (*_stats(), _load_and_capacity(), _desired_replicas(), _headroom_history(), *_cost()),
    )
