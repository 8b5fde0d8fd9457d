"""Template variables shared by the dashboards, the selectors that use them, and the
dashboard envelope.

Every dashboard has ``datasource`` (any Prometheus), ``target`` and ``model``; those
that draw latency against a budget also have ``budget`` (seconds, default 0.05: the
default SLO threshold, docs/design.md §10). No exported series carries the latency threshold
itself, so the budget is a text box a user sets to the model's threshold; the SLO
numbers that *are* exported (objective, burn rates, budget remaining) are plotted as
they are.
"""

from __future__ import annotations

from collections.abc import Sequence

from tritonwatch.dashboards.panels import DATASOURCE, Json, Row, layout

SCHEMA_VERSION = 39
"""Grafana 10.4 / 11.x; newer Grafana migrates the JSON forward on load."""
TAG = "tritonwatch"
DEFAULT_BUDGET = "0.05"

MODEL = 'target=~"$target",model=~"$model"'
"""The label matchers every per-model query starts with."""


def sel(*matchers: str) -> str:
    """``{target=~"$target",model=~"$model",…}`` with further matchers."""
    return "{" + ",".join([MODEL, *matchers]) + "}"


def datasource_variable() -> Json:
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "refresh": 1,
        "regex": "",
        "options": [],
    }


def query_variable(
    name: str, label: str, metric: str, *, multi: bool = True, matchers: str = ""
) -> Json:
    """A variable listing the values of label ``name`` on ``metric{matchers}``."""
    series = f"{metric}{{{matchers}}}" if matchers else metric
    definition = f"label_values({series}, {name})"
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": definition,
        "query": {"query": definition, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2,  # on time range change: models come and go
        "sort": 1,
        "multi": multi,
        "includeAll": multi,
        "allValue": ".*" if multi else None,
        "current": {},
        "hide": 0,
        "regex": "",
        "options": [],
    }


def target_variable(*, multi: bool = True) -> Json:
    return query_variable("target", "Target", "tritonwatch_up", multi=multi)


def model_variable(
    metric: str = "tritonwatch_canary_requests_total", *, multi: bool = True
) -> Json:
    """Models of the selected targets, read off ``metric`` (canary series by default:
    every watched model has them)."""
    return query_variable("model", "Model", metric, multi=multi, matchers='target=~"$target"')


def textbox_variable(name: str, label: str, value: str, description: str) -> Json:
    return {
        "name": name,
        "label": label,
        "description": description,
        "type": "textbox",
        "query": value,
        "current": {"text": value, "value": value},
        "options": [{"selected": True, "text": value, "value": value}],
        "hide": 0,
    }


def budget_variable() -> Json:
    return textbox_variable(
        "budget",
        "p95 budget (s)",
        DEFAULT_BUDGET,
        "The latency SLO threshold in seconds, drawn as the budget line "
        "(slo.latency.threshold in the tritonwatch config; 50ms by default).",
    )


def custom_variable(name: str, label: str, values: Sequence[str], description: str) -> Json:
    options = [{"selected": i == 0, "text": v, "value": v} for i, v in enumerate(values)]
    return {
        "name": name,
        "label": label,
        "description": description,
        "type": "custom",
        "query": ",".join(values),
        "current": {"text": values[0], "value": values[0]},
        "options": options,
        "multi": False,
        "includeAll": False,
        "hide": 0,
    }


def window_variable() -> Json:
    return custom_variable(
        "window",
        "Quantile window",
        ["5m", "1m"],
        "The sliding window of tritonwatch_latency_quantile_seconds (1m at "
        "exporter.detail: full only).",
    )


def dashboard(
    uid: str,
    title: str,
    description: str,
    variables: Sequence[Json],
    rows: Sequence[Row],
    *,
    annotations: Sequence[Json] = (),
) -> Json:
    """The whole dashboard JSON, ready for file provisioning (no numeric ``id``)."""
    builtin = {
        "builtIn": 1,
        "datasource": {"type": "grafana", "uid": "-- Grafana --"},
        "enable": True,
        "hide": True,
        "iconColor": "rgba(0, 211, 255, 1)",
        "name": "Annotations & Alerts",
        "type": "dashboard",
    }
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": [TAG],
        "editable": True,
        "graphTooltip": 1,  # shared crosshair
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "time": {"from": "now-3h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "version": 1,
        "links": [
            {
                "title": "tritonwatch",
                "type": "dashboards",
                "tags": [TAG],
                "asDropdown": True,
                "includeVars": True,
                "keepTime": True,
            }
        ],
        "annotations": {"list": [builtin, *annotations]},
        "templating": {"list": [datasource_variable(), *variables]},
        "panels": layout(rows),
    }


def prometheus_annotation(name: str, expr: str, title: str, text: str, color: str) -> Json:
    """Marks on every time series where ``expr`` has a value (e.g. a recommendation)."""
    return {
        "name": name,
        "datasource": DATASOURCE,
        "enable": True,
        "hide": False,
        "iconColor": color,
        "expr": expr,
        "step": "1m",
        "titleFormat": title,
        "textFormat": text,
        "useValueForTime": False,
    }
