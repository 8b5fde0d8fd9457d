"""Grafana panels as plain data, and the grid layout that places them.

Each builder returns a :class:`Panel` (title, queries, visualisation options); a
:class:`Row` groups panels under a heading. :func:`layout` turns rows into the
dashboard JSON's ``panels`` list: ids in reading order, ``gridPos`` flowing left to
right on Grafana's 24-column grid. Only what a panel needs is written; Grafana fills
every other option with its default, so the JSON stays short enough to review.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

GRID_WIDTH = 24
DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
"""Every panel and query reads the data source the ``datasource`` variable selects."""

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Query:
    """One PromQL target of a panel.

    Args:
        expr: the PromQL, with Grafana variables (``$target``, ``$__rate_interval``).
        legend: Grafana's legend format (``{{model}} p95``).
        instant: evaluate once at the end of the range instead of over it.
        table: return Prometheus' labels as columns (``format: table``).
    """

    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False
    heatmap: bool = False

    def to_json(self, ref_id: str) -> Json:
        target: Json = {
            "datasource": DATASOURCE,
            "editorMode": "code",
            "expr": self.expr,
            "refId": ref_id,
            "range": not self.instant,
            "instant": self.instant,
        }
        if self.legend:
            target["legendFormat"] = self.legend
        if self.table:
            target["format"] = "table"
        elif self.heatmap:
            target["format"] = "heatmap"
        return target


@dataclass(frozen=True, slots=True)
class Panel:
    """A visualisation: ``kind`` is Grafana's panel type id (timeseries, stat, …)."""

    kind: str
    title: str
    description: str
    queries: tuple[Query, ...]
    width: int = 12
    height: int = 8
    defaults: Mapping[str, Any] = field(default_factory=dict)
    overrides: tuple[Json, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    transformations: tuple[Json, ...] = ()

    def to_json(self, panel_id: int, x: int, y: int) -> Json:
        refs = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        return {
            "id": panel_id,
            "type": self.kind,
            "title": self.title,
            "description": self.description,
            "datasource": DATASOURCE,
            "gridPos": {"h": self.height, "w": self.width, "x": x, "y": y},
            "targets": [q.to_json(refs[i]) for i, q in enumerate(self.queries)],
            "fieldConfig": {"defaults": dict(self.defaults), "overrides": list(self.overrides)},
            "options": dict(self.options),
            "transformations": list(self.transformations),
        }


@dataclass(frozen=True, slots=True)
class Row:
    """A heading and the panels under it."""

    title: str
    panels: tuple[Panel, ...]


def layout(rows: Sequence[Row]) -> list[Json]:
    """The dashboard's ``panels``: a row panel per :class:`Row`, then its panels, flowing
    left to right and wrapping at the grid's width; ids count up from 1."""
    out: list[Json] = []
    y = 0
    for row in rows:
        out.append(
            {
                "id": len(out) + 1,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        x, line_height = 0, 0
        for panel in row.panels:
            if x + panel.width > GRID_WIDTH:
                x, y, line_height = 0, y + line_height, 0
            out.append(panel.to_json(len(out) + 1, x, y))
            x += panel.width
            line_height = max(line_height, panel.height)
        y += line_height
    return out


# --- field config pieces ---------------------------------------------------------------


def thresholds(*steps: tuple[float | None, str]) -> Json:
    """Absolute thresholds: ``(None, "green")`` is the base colour, then (value, colour)."""
    return {"mode": "absolute", "steps": [{"value": v, "color": c} for v, c in steps]}


def by_name(name: str, **properties: Any) -> Json:
    """An override for the series called ``name`` (its legend)."""
    return {
        "matcher": {"id": "byName", "options": name},
        "properties": [{"id": key, "value": value} for key, value in properties.items()],
    }


def by_query(ref_id: str, properties: Mapping[str, Any]) -> Json:
    """An override for every series of one query (``A``, ``B``, …)."""
    return {
        "matcher": {"id": "byFrameRefID", "options": ref_id},
        "properties": [{"id": key, "value": value} for key, value in properties.items()],
    }


BUDGET_LINE: dict[str, Any] = {
    "color": {"mode": "fixed", "fixedColor": "red"},
    "custom.lineStyle": {"fill": "dash", "dash": [10, 10]},
    "custom.fillOpacity": 0,
    "custom.lineWidth": 2,
}
"""How a budget series (``vector($budget)``) is drawn: a dashed red line."""

_LEGEND = {"displayMode": "list", "placement": "bottom", "showLegend": True}
_TOOLTIP = {"mode": "multi", "sort": "desc"}


# --- panel builders --------------------------------------------------------------------


def timeseries(
    title: str,
    description: str,
    *queries: Query,
    unit: str,
    width: int = 12,
    height: int = 8,
    stacked: bool = False,
    minimum: float | None = 0,
    maximum: float | None = None,
    overrides: Sequence[Json] = (),
    threshold_lines: Json | None = None,
) -> Panel:
    """A time series graph; ``threshold_lines`` draws the thresholds as dashed lines."""
    custom: Json = {
        "drawStyle": "line",
        "lineWidth": 1,
        "fillOpacity": 30 if stacked else 10,
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"mode": "normal" if stacked else "none", "group": "A"},
        "thresholdsStyle": {"mode": "dashed" if threshold_lines else "off"},
    }
    defaults: Json = {"unit": unit, "custom": custom}
    if minimum is not None:
        defaults["min"] = minimum
    if maximum is not None:
        defaults["max"] = maximum
    if threshold_lines:
        defaults["thresholds"] = threshold_lines
    return Panel(
        "timeseries",
        title,
        description,
        queries,
        width,
        height,
        defaults,
        tuple(overrides),
        {"legend": _LEGEND, "tooltip": _TOOLTIP},
    )


def stat(
    title: str,
    description: str,
    *queries: Query,
    unit: str,
    width: int = 6,
    height: int = 5,
    steps: Json | None = None,
    mappings: Sequence[Json] = (),
    decimals: int | None = None,
) -> Panel:
    """A big number per series (the last value), coloured by ``steps``."""
    defaults: Json = {
        "unit": unit,
        "thresholds": steps or thresholds((None, "green")),
        "color": {"mode": "thresholds"},
        "mappings": list(mappings),
    }
    if decimals is not None:
        defaults["decimals"] = decimals
    options = {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "colorMode": "background",
        "graphMode": "none",
        "textMode": "value_and_name",
        "justifyMode": "auto",
        "orientation": "auto",
    }
    return Panel("stat", title, description, queries, width, height, defaults, (), options)


def table(
    title: str,
    description: str,
    *queries: Query,
    width: int = 24,
    height: int = 8,
    unit: str = "none",
    transformations: Sequence[Json] = (),
    overrides: Sequence[Json] = (),
) -> Panel:
    """A table of instant results, one row per series, labels as columns."""
    return Panel(
        "table",
        title,
        description,
        queries,
        width,
        height,
        {"unit": unit, "custom": {"align": "auto", "cellOptions": {"type": "auto"}}},
        tuple(overrides),
        {"showHeader": True, "cellHeight": "sm", "footer": {"show": False}},
        tuple(transformations),
    )


def barchart(
    title: str,
    description: str,
    *queries: Query,
    x_field: str,
    unit: str,
    width: int = 12,
    height: int = 8,
    transformations: Sequence[Json] = (),
    overrides: Sequence[Json] = (),
) -> Panel:
    """Bars per category of ``x_field`` (a string field, e.g. a label of a table query)."""
    return Panel(
        "barchart",
        title,
        description,
        queries,
        width,
        height,
        {"unit": unit, "min": 0, "custom": {"fillOpacity": 80, "lineWidth": 1}},
        tuple(overrides),
        {
            "xField": x_field,
            "orientation": "vertical",
            "showValue": "auto",
            "stacking": "none",
            "groupWidth": 0.7,
            "barWidth": 0.9,
            "legend": _LEGEND,
            "tooltip": _TOOLTIP,
        },
        tuple(transformations),
    )


def state_timeline(
    title: str,
    description: str,
    *queries: Query,
    width: int = 24,
    height: int = 7,
    mappings: Sequence[Json] = (),
    steps: Json | None = None,
) -> Panel:
    """One lane per series showing when a 0/1 signal was on."""
    return Panel(
        "state-timeline",
        title,
        description,
        queries,
        width,
        height,
        {
            "color": {"mode": "thresholds"},
            "thresholds": steps or thresholds((None, "transparent"), (1, "red")),
            "mappings": list(mappings),
            "custom": {"fillOpacity": 80, "lineWidth": 0},
        },
        (),
        {
            "showValue": "never",
            "mergeValues": True,
            "rowHeight": 0.9,
            "alignValue": "left",
            "legend": {**_LEGEND, "showLegend": False},
            "tooltip": {"mode": "single", "sort": "none"},
        },
    )


def heatmap(
    title: str, description: str, query: Query, *, width: int = 12, height: int = 8
) -> Panel:
    """A latency heatmap from a histogram's buckets (``format: heatmap`` query)."""
    return Panel(
        "heatmap",
        title,
        description,
        (query,),
        width,
        height,
        {"custom": {"scaleDistribution": {"type": "linear"}}},
        (),
        {
            "calculate": False,
            "yAxis": {"unit": "s", "axisPlacement": "left"},
            "cellGap": 1,
            "color": {"mode": "scheme", "scheme": "Oranges", "exponent": 0.5, "steps": 64},
            "rowsFrame": {"layout": "auto"},
            "tooltip": {"mode": "single", "yHistogram": True},
            "legend": {"show": True},
        },
    )


def value_map(value: str, text: str, color: str) -> Json:
    """A value mapping: show ``text`` in ``color`` where the value is ``value``."""
    return {
        "type": "value",
        "options": {value: {"text": text, "color": color, "index": 0}},
    }
