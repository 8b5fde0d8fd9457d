"""The capacity dashboard opens on capacity and headroom: that row reads every capacity
family the daemon exports, under export/capacity_metrics.py's names, colours by the
capacity section's defaults, draws the forecast from the daemon's own trend, and shows
a flat trend's +Inf as "never"."""

from __future__ import annotations

import json
from typing import Any

from promql_names import metric_names, substitute

from tritonwatch.config.capacity_schema import CapacityConfig
from tritonwatch.dashboards import capacity, capacity_headroom, render
from tritonwatch.export import capacity_metrics

ROW = "Capacity and headroom"
PANELS = [
    "Headroom",
    "Time to exhaustion",
    "Capacity age",
    "Capacity stale",
    "Compute drift",
    "Canary share of the load",
    "Load and capacity",
    "Desired replicas",
    "Headroom over time",
    "Cost per 1000 inferences",
    "GPU-seconds per 1000 inferences",
]
VALUES = {"target": "sim", "model": "simple", "horizon": "14400"}


def _exported_names() -> dict[str, str]:
    """Constant → family of every family export/capacity_metrics.py renders."""
    return {
        key: value
        for key, value in vars(capacity_metrics).items()
        if key.isupper() and isinstance(value, str) and value.startswith("tritonwatch_")
    }


def _row_panels() -> dict[str, dict[str, Any]]:
    """The panels under the first row heading, by title (the JSON as rendered)."""
    panels = json.loads(render(capacity.build()))["panels"]
    assert panels[0]["type"] == "row" and panels[0]["title"] == ROW
    following = panels[1:]
    end = next(i for i, p in enumerate(following) if p["type"] == "row")
    return {p["title"]: p for p in following[:end]}


def _exprs(panel: dict[str, Any]) -> list[str]:
    return [target["expr"] for target in panel["targets"]]


def test_the_row_spells_every_exported_capacity_family_as_the_exporter_does() -> None:
    """Breaks if a capacity family is renamed or added on one side only: the dashboards
    may not import the exporter, so the row repeats its names."""
    exported = _exported_names()
    assert len(exported) == 13
    for key, family in exported.items():
        assert getattr(capacity_headroom, key) == family, key


def test_capacity_and_headroom_is_the_first_row_and_reads_every_family() -> None:
    """Breaks if the row moves down, loses a panel, or stops reading a family."""
    panels = _row_panels()
    assert list(panels) == PANELS
    read = {
        name
        for panel in panels.values()
        for expr in _exprs(panel)
        for name in metric_names(substitute(expr, VALUES))
    }
    assert read == set(_exported_names().values())


def test_colours_and_the_horizon_are_the_capacity_sections_defaults() -> None:
    """Breaks if the headroom, exhaustion or drift colours, or the horizon box, stop
    matching capacity.headroom_alert, forecast_horizon and stale_drift's defaults."""
    defaults = CapacityConfig()
    panels = _row_panels()

    def steps(title: str) -> list[tuple[float | None, str]]:
        found = panels[title]["fieldConfig"]["defaults"]["thresholds"]["steps"]
        return [(s["value"], s["color"]) for s in found]

    alert = defaults.headroom_alert
    assert steps("Headroom") == [(None, "red"), (alert, "yellow"), (2 * alert, "green")]
    assert steps("Headroom over time") == steps("Headroom")
    assert steps("Time to exhaustion")[:2] == [(None, "red"), (defaults.forecast_horizon, "yellow")]
    drift = defaults.stale_drift
    assert steps("Compute drift") == [(None, "red"), (-drift, "green"), (drift, "red")]
    box = {v["name"]: v for v in capacity.build()["templating"]["list"]}["horizon"]
    assert box["type"] == "textbox"
    assert float(box["current"]["value"]) == defaults.forecast_horizon


def test_a_flat_trend_reads_never_and_staleness_reads_ok_or_stale() -> None:
    """Breaks if +Inf (a flat or falling load) would show as a number of seconds, or
    the 0/1 staleness as a bare number. Grafana looks a value mapping up with the value
    as a JavaScript object key: +Inf is the key "Infinity"."""
    panels = _row_panels()
    exhaustion = panels["Time to exhaustion"]["fieldConfig"]["defaults"]
    assert exhaustion["unit"] == "s"
    assert exhaustion["mappings"] == [
        {"type": "value", "options": {"Infinity": {"text": "never", "color": "green", "index": 0}}}
    ]
    stale = panels["Capacity stale"]["fieldConfig"]["defaults"]["mappings"]
    texts = {value: option["text"] for m in stale for value, option in m["options"].items()}
    assert texts == {"0": "ok", "1": "stale"}


def test_the_forecast_is_the_load_carried_ahead_on_the_daemons_trend() -> None:
    """Breaks if the forecast line stops being load + slope × horizon for the selected
    model (e.g. a predict_linear with a hard-coded window the config may not share)."""
    by_ref = {t["refId"]: t["expr"] for t in _row_panels()["Load and capacity"]["targets"]}
    assert metric_names(by_ref["A"]) == {capacity_headroom.CAPACITY}
    assert metric_names(by_ref["C"]) == {capacity_headroom.LOAD}
    assert by_ref["D"] == (
        f'{by_ref["C"]} + {capacity_headroom.TREND}{{target=~"$target",model=~"$model"}} * $horizon'
    )


def test_desired_replicas_show_every_service_of_the_selected_model() -> None:
    """Breaks if the desired replicas are filtered by target (the family has no target
    label: the panel would be empty) or lose the service from the legend."""
    (target,) = _row_panels()["Desired replicas"]["targets"]
    assert target["expr"] == 'tritonwatch_desired_replicas{model=~"$model"}'
    assert target["legendFormat"] == "{{service}}"


def test_cost_and_gpu_seconds_are_read_at_load_and_at_capacity() -> None:
    """Breaks if a side of the cost goes missing or GPU-seconds lose their unit."""
    panels = _row_panels()
    for title, family, unit in (
        ("Cost per 1000 inferences", capacity_headroom.COST, "short"),
        ("GPU-seconds per 1000 inferences", capacity_headroom.GPU_SECONDS, "s"),
    ):
        assert _exprs(panels[title]) == [
            f'{family}{{target=~"$target",model=~"$model",at="{at}"}}'
            for at in ("load", "capacity")
        ]
        assert panels[title]["fieldConfig"]["defaults"]["unit"] == unit
