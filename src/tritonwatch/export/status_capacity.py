"""A model's capacity on the status page: load against capacity and the trend's forecast
as a small inline SVG, one sentence on headroom, exhaustion and replicas, and the cost
per 1 000 inferences (docs/guides/status-page.md).

Pure: :func:`capacity_fragments` maps the capacity board's readings, the desired
replicas and the config to an escaped HTML fragment per (target, model). A model with a
capacity gets the chart, the sentence and the cost; a model without one gets a single
muted line when its scheduled sweeps are off (``sweep.enabled``: capacity comes from
them), and nothing while they are on (the first sweep brings it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from html import escape

from tritonwatch.config.capacity_schema import CapacityConfig
from tritonwatch.config.schema import Config
from tritonwatch.export.capacity_alerts import human_duration
from tritonwatch.export.status_charts import (
    BUDGET_COLOUR,
    FRAME_COLOUR,
    OK_COLOUR,
    OVER_COLOUR,
    P95_COLOUR,
)
from tritonwatch.records.capacity_records import CapacityReading, CostAt, DesiredReplicas

TargetModel = tuple[str, str]

CHART_WIDTH, CHART_HEIGHT = 160.0, 40.0
CHART_LEFT, CHART_RIGHT, CHART_TOP, CHART_BOTTOM = 4.0, 4.0, 4.0, 4.0
CHART_HEADROOM = 1.15
"""The y axis reaches 15 % above the largest of capacity, load and the trend's ends."""

NO_SWEEPS = '<p class="capacity-none muted">capacity: needs scheduled sweeps (sweep.enabled)</p>'
"""The one line a model without a capacity shows while its scheduled sweeps are off."""


def _f(value: float) -> str:
    return f"{value:.2f}"


def rate_text(per_second: float) -> str:
    """``58.4/s``, ``1,234/s``: inferences per second as a person reads them."""
    return f"{per_second:,.0f}/s" if abs(per_second) >= 100 else f"{per_second:.3g}/s"


def _full_text(reading: CapacityReading) -> str:
    seconds = reading.exhaustion_seconds
    if seconds <= 0:
        return "at or past capacity"
    if math.isinf(seconds):
        return "no load trend yet" if reading.slope is None else "not filling at the current trend"
    return f"at the current trend full in {human_duration(seconds)}"


def _replicas_text(wanted: DesiredReplicas, settings: CapacityConfig) -> str:
    count = wanted.replicas
    noun, verb = ("replica", "holds") if count == 1 else ("replicas", "hold")
    spare = settings.spare_replicas
    spares = f" ({spare} spare included)" if spare else ""
    return (
        f"{count} {noun} of {wanted.service} {verb} today's load at "
        f"{settings.target_utilisation:.0%} utilisation{spares}"
    )


def capacity_sentence(
    reading: CapacityReading,
    replicas: DesiredReplicas | None,
    settings: CapacityConfig,
    wall_time: float | None,
) -> str:
    """``headroom 42% (58/s of 100/s, canary 1/s included); at the current trend
    full in 3 h 10 m; 3 replicas of svc hold today's load at 80% utilisation; capacity
    swept 2 h ago``.

    The trend part reads ``at or past capacity`` when the trend is there already,
    ``not filling at the current trend`` when flat or falling, ``no load trend yet``
    before two load samples; a stale capacity adds how far the compute time moved, and
    ``wall_time`` (Unix seconds) the capacity's age. A capacity whose open-loop check
    found no rate inside the budget says so instead of a headroom.
    """
    capacity, swept = reading.capacity_per_second, reading.capacity
    parts: list[str] = []
    if capacity is None:
        closed = "" if swept is None else f" (closed loop {rate_text(swept.closed_loop)})"
        parts.append(f"capacity unknown: no open-loop rate stayed inside the budget{closed}")
    elif reading.load is None or reading.headroom is None:
        parts.append(f"capacity {rate_text(capacity)}; no load reading yet")
    else:
        canary = reading.canary_load
        share = f", canary {rate_text(canary)} included" if canary else ""
        parts.append(
            f"headroom {reading.headroom:.0%} "
            f"({rate_text(reading.load)} of {rate_text(capacity)}{share})"
        )
        parts.append(_full_text(reading))
    if replicas is not None:
        parts.append(_replicas_text(replicas, settings))
    if reading.stale and reading.drift is not None:
        parts.append(f"capacity stale: compute time moved {reading.drift:+.0%} since the sweep")
    if swept is not None and wall_time is not None:
        parts.append(f"capacity swept {human_duration(max(wall_time - swept.measured_at, 0))} ago")
    return "; ".join(parts)


def _costs(values: Mapping[CostAt, float]) -> str:
    words = {"load": "at today's load", "capacity": "at capacity"}
    return ", ".join(f"{values[at]:.3g} {words[at]}" for at in ("load", "capacity") if at in values)


def cost_line(reading: CapacityReading) -> str | None:
    """``cost per 1 000 inferences: 0.0123 at today's load, 0.008 at capacity`` (the
    target price's currency), or GPU-seconds per 1 000 for a target without a price;
    None when neither is known."""
    if reading.cost_per_1k:
        return f"cost per 1 000 inferences: {_costs(reading.cost_per_1k)} (price's currency)"
    if reading.gpu_seconds_per_1k:
        return f"GPU-seconds per 1 000 inferences: {_costs(reading.gpu_seconds_per_1k)}"
    return None


def capacity_chart(reading: CapacityReading, settings: CapacityConfig) -> str | None:
    """Load now (a dot at the left edge) and the fitted trend from now to
    ``capacity.forecast_horizon`` (the right edge) against capacity (dashed), with the
    point where the trend reaches capacity marked; None without a capacity or a load.
    Values under 0 are drawn at 0; the ``data-*`` attributes keep them as read."""
    capacity, load = reading.capacity_per_second, reading.load
    if capacity is None or load is None or reading.headroom is None:
        return None
    horizon = settings.forecast_horizon
    trend: tuple[float, float] | None = None
    if reading.forecast is not None and reading.slope is not None and horizon > 0:
        trend = (reading.forecast - reading.slope * horizon, reading.forecast)
    y_max = max(capacity, load, *(trend or ())) * CHART_HEADROOM
    plot_w = CHART_WIDTH - CHART_LEFT - CHART_RIGHT
    plot_h = CHART_HEIGHT - CHART_TOP - CHART_BOTTOM

    def y(value: float) -> float:
        return CHART_TOP + (1.0 - min(max(value, 0.0), y_max) / y_max) * plot_h

    cap_y = _f(y(capacity))
    parts = [
        f'<rect x="0.5" y="0.5" width="{CHART_WIDTH - 1:g}" height="{CHART_HEIGHT - 1:g}"'
        f' fill="#ffffff" stroke="{FRAME_COLOUR}"/>',
        f'<line class="capacity" x1="{CHART_LEFT:g}" x2="{CHART_WIDTH - CHART_RIGHT:g}"'
        f' y1="{cap_y}" y2="{cap_y}" stroke="{BUDGET_COLOUR}" stroke-width="2"'
        f' stroke-dasharray="6 4" shape-rendering="crispEdges"/>',
    ]
    forecast_data = ""
    if trend is not None:
        colour = OVER_COLOUR if trend[1] >= capacity else P95_COLOUR
        parts.append(
            f'<line class="forecast" x1="{CHART_LEFT:g}" x2="{CHART_WIDTH - CHART_RIGHT:g}"'
            f' y1="{_f(y(trend[0]))}" y2="{_f(y(trend[1]))}" stroke="{colour}"'
            f' stroke-width="2" stroke-linecap="round"/>'
        )
        forecast_data = f' data-forecast="{trend[1]!r}"'
        full = reading.exhaustion_seconds
        if 0 < full <= horizon:
            parts.append(
                f'<circle class="full" cx="{_f(CHART_LEFT + full / horizon * plot_w)}"'
                f' cy="{cap_y}" r="2.5" fill="{OVER_COLOUR}"/>'
            )
    headroom = reading.headroom
    dot = (
        OVER_COLOUR
        if headroom < 0
        else BUDGET_COLOUR
        if headroom < settings.headroom_alert
        else OK_COLOUR
    )
    parts.append(
        f'<circle class="load" cx="{CHART_LEFT:g}" cy="{_f(y(load))}" r="3" fill="{dot}"/>'
    )
    span = human_duration(horizon)
    forecast_words = (
        "no trend yet" if trend is None else f"the trend reaches {rate_text(trend[1])} in {span}"
    )
    title = (
        f"load {rate_text(load)} now against a capacity of {rate_text(capacity)} (dashed); "
        f"{forecast_words}"
    )
    return (
        f'<svg class="capacity-chart" role="img" style="vertical-align:middle"'
        f' width="{CHART_WIDTH:g}" height="{CHART_HEIGHT:g}"'
        f' viewBox="0 0 {CHART_WIDTH:g} {CHART_HEIGHT:g}" data-load="{load!r}"'
        f' data-capacity="{capacity!r}"{forecast_data} data-horizon-seconds="{horizon!r}"'
        f' data-y-max="{y_max!r}"><title>{escape(title)}</title>{"".join(parts)}</svg>'
    )


def capacity_fragment(
    reading: CapacityReading,
    replicas: DesiredReplicas | None,
    settings: CapacityConfig,
    wall_time: float | None,
) -> str:
    """The chart, the sentence and the cost of a model with a capacity, escaped."""
    chart = capacity_chart(reading, settings) or ""
    sentence = escape(capacity_sentence(reading, replicas, settings, wall_time))
    stale = " stale" if reading.stale else ""
    cost = cost_line(reading)
    cost_html = "" if cost is None else f'<p class="capacity-cost">{escape(cost)}</p>'
    return (
        f'<div class="capacity{stale}"><p class="capacity-line">{chart} {sentence}</p>'
        f"{cost_html}</div>"
    )


def capacity_fragments(
    readings: Iterable[CapacityReading],
    replicas: Iterable[DesiredReplicas],
    config: Config,
    wall_time: float | None,
) -> dict[TargetModel, str]:
    """Per watched (target, model): its capacity fragment when its reading has a sweep's
    capacity, :data:`NO_SWEEPS` when it has none and its scheduled sweeps are off; a
    model with neither is left out."""
    wanted = {(r.service, r.model): r for r in replicas}
    with_capacity = {(r.target, r.model): r for r in readings if r.capacity is not None}
    fragments: dict[TargetModel, str] = {}
    for target in config.targets:
        for model in target.models:
            key = (target.name, model.name)
            reading = with_capacity.get(key)
            if reading is not None:
                desired = wanted.get((reading.service, reading.model))
                fragments[key] = capacity_fragment(reading, desired, config.capacity, wall_time)
            elif not config.sweep_for(model).enabled:
                fragments[key] = NO_SWEEPS
    return fragments
