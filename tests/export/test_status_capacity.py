"""The status page's capacity view: load against capacity and its forecast as a chart,
one sentence on headroom, exhaustion and replicas, and the cost per 1 000 inferences."""

from __future__ import annotations

import math
from dataclasses import replace

from tritonwatch.config import parse_config
from tritonwatch.config.capacity_schema import CapacityConfig
from tritonwatch.export.status_capacity import (
    CHART_HEADROOM,
    NO_SWEEPS,
    capacity_chart,
    capacity_fragment,
    capacity_sentence,
    cost_line,
)
from tritonwatch.export.status_page import render_status_page
from tritonwatch.export.status_view import StatusInputs, status_snapshot
from tritonwatch.records.capacity_records import CapacityReading, DesiredReplicas, SweptCapacity
from tritonwatch.state.canary_board import SeriesSnapshot

SWEPT_AT = 1_700_000_000.0
NOW = SWEPT_AT + 2 * 3600 + 5 * 60
SETTINGS = CapacityConfig()
FILLING = CapacityReading(
    target="t",
    model="m",
    service="svc",
    capacity=SweptCapacity(closed_loop=110.0, open_loop=100.0, checked=True, measured_at=SWEPT_AT),
    load=58.0,
    canary_load=1.0,
    slope=0.002,
    forecast=90.0,
    exhaustion_seconds=3 * 3600 + 10 * 60,
    gpu_seconds_per_1k={"load": 1.5, "capacity": 0.9},
)
THREE = DesiredReplicas("svc", "m", 3, 58.0, 100.0, ("t",))


def test_a_filling_model_reads_headroom_time_to_full_replicas_and_age() -> None:
    """Breaks if the headroom, the time to full (human_duration), the replicas of the
    model's service or the capacity's age is wrong or missing."""
    assert capacity_sentence(FILLING, THREE, SETTINGS, NOW) == (
        "headroom 42% (58/s of 100/s, canary 1/s included); at the current trend full in 3 h 10 m; "
        "3 replicas of svc hold today's load at 80% utilisation; capacity swept 2 h 5 m ago"
    )


def test_flat_full_and_trendless_loads_say_so() -> None:
    """Breaks if an infinite exhaustion reads as a time, a zero one as "full in 0 s", or
    a model without a fitted trend yet reads as not filling."""
    flat = replace(FILLING, slope=-0.001, forecast=40.0, exhaustion_seconds=math.inf)
    assert capacity_sentence(flat, None, SETTINGS, None) == (
        "headroom 42% (58/s of 100/s, canary 1/s included); not filling at the current trend"
    )
    over = replace(FILLING, load=120.0, forecast=150.0, exhaustion_seconds=0.0)
    assert capacity_sentence(over, None, SETTINGS, None) == (
        "headroom -20% (120/s of 100/s, canary 1/s included); at or past capacity"
    )
    young = replace(FILLING, slope=None, forecast=None, exhaustion_seconds=math.inf)
    assert capacity_sentence(young, None, SETTINGS, None) == (
        "headroom 42% (58/s of 100/s, canary 1/s included); no load trend yet"
    )


def test_a_stale_capacity_says_how_far_compute_time_moved() -> None:
    stale = replace(FILLING, drift=0.3, stale=True)
    sentence = capacity_sentence(stale, None, SETTINGS, NOW)
    assert sentence.endswith(
        "; capacity stale: compute time moved +30% since the sweep; capacity swept 2 h 5 m ago"
    )
    assert "stale" not in capacity_sentence(replace(FILLING, drift=0.1), None, SETTINGS, NOW)
    assert '<div class="capacity stale">' in capacity_fragment(stale, None, SETTINGS, NOW)


def test_one_spare_replica_and_a_missing_load_are_said() -> None:
    spare = CapacityConfig(spare_replicas=1, target_utilisation=0.5)
    one = replace(THREE, replicas=1)
    no_load = replace(FILLING, load=None)
    assert capacity_sentence(no_load, one, spare, None) == (
        "capacity 100/s; no load reading yet; "
        "1 replica of svc holds today's load at 50% utilisation (1 spare included)"
    )
    assert capacity_chart(no_load, spare) is None


def test_cost_at_load_and_capacity_or_gpu_seconds_without_a_price() -> None:
    """Breaks if a priced target shows GPU-seconds, an unpriced one nothing, or the two
    sides are swapped."""
    assert cost_line(FILLING) == (
        "GPU-seconds per 1 000 inferences: 1.5 at today's load, 0.9 at capacity"
    )
    priced = replace(FILLING, cost_per_1k={"load": 0.0123, "capacity": 0.008})
    assert cost_line(priced) == (
        "cost per 1 000 inferences: 0.0123 at today's load, 0.008 at capacity (price's currency)"
    )
    assert cost_line(replace(FILLING, gpu_seconds_per_1k={})) is None
    fragment = capacity_fragment(priced, THREE, SETTINGS, NOW)
    assert '<p class="capacity-cost">cost per 1 000 inferences: 0.0123 at today&#x27;s' in fragment


def test_the_chart_draws_load_trend_capacity_and_the_crossing_where_they_are() -> None:
    """Breaks if the capacity line, the trend's ends or the crossing point sit anywhere
    but where the numbers put them (the trend starts at forecast − slope × horizon)."""
    chart = capacity_chart(FILLING, SETTINGS)
    assert chart is not None
    horizon = SETTINGS.forecast_horizon
    start = 90.0 - 0.002 * horizon
    y_max = max(100.0, 58.0, start, 90.0) * CHART_HEADROOM

    def y(value: float) -> str:
        return f"{4.0 + (1.0 - value / y_max) * 32.0:.2f}"

    assert 'data-load="58.0" data-capacity="100.0" data-forecast="90.0"' in chart
    assert f'class="capacity" x1="4" x2="156" y1="{y(100.0)}" y2="{y(100.0)}"' in chart
    assert f'class="forecast" x1="4" x2="156" y1="{y(start)}" y2="{y(90.0)}"' in chart
    full_x = 4.0 + (3 * 3600 + 10 * 60) / horizon * 152.0
    assert f'<circle class="full" cx="{full_x:.2f}" cy="{y(100.0)}"' in chart
    assert f'<circle class="load" cx="4" cy="{y(58.0)}"' in chart
    later = capacity_chart(replace(FILLING, exhaustion_seconds=horizon * 2), SETTINGS)
    assert later is not None and 'class="full"' not in later


def test_names_are_escaped() -> None:
    fragment = capacity_fragment(FILLING, replace(THREE, service="a<b>&c"), SETTINGS, NOW)
    assert "3 replicas of a&lt;b&gt;&amp;c hold" in fragment and "<b>&c" not in fragment


def _page(config_text: str, readings: list[CapacityReading]) -> str:
    config = parse_config(config_text, "capacity.yaml")
    rows = [SeriesSnapshot("t", model, "http", {}, (), 0.0, 0, {}) for model in ("m", "n")]
    inputs = StatusInputs(
        config=config,
        canary=rows,
        readiness={},
        triton=[],
        sweeps={},
        slo_statuses=[],
        advice={},
        experiments=[],
        p95_history=lambda key: (),
        healthy=True,
        capacity=readings,
        replicas=[THREE],
        wall_time=NOW,
    )
    return render_status_page(status_snapshot(inputs))


def _section(page: str, model: str) -> str:
    start = page.index(f'data-model="{model}"')
    return page[start : page.index("</section>", start)]


TARGETS = "targets: [{name: t, url: 'http://127.0.0.1:1', models: [{name: m}, {name: n}]}]\n"


def test_the_page_shows_capacity_for_the_model_with_one_only() -> None:
    """Breaks if the view drops the fragment, puts it on the wrong model, or shows
    anything for a model without a capacity while its sweeps are on."""
    no_capacity = CapacityReading("t", "n", "svc", None, 12.0, 1.0)
    page = _page(TARGETS + "sweep: {enabled: true}\n", [FILLING, no_capacity])
    m, n = _section(page, "m"), _section(page, "n")
    assert '<svg class="capacity-chart"' in m
    assert (
        "headroom 42% (58/s of 100/s, canary 1/s included); at the current trend full in 3 h 10 m; "
        "3 replicas of svc hold today&#x27;s load at 80% utilisation; "
        "capacity swept 2 h 5 m ago</p>"
    ) in m
    assert "capacity" not in n


def test_without_scheduled_sweeps_a_model_without_capacity_says_what_it_needs() -> None:
    page = _page(TARGETS, [FILLING])
    assert NO_SWEEPS in _section(page, "n")
    assert NO_SWEEPS not in _section(page, "m") and "capacity-chart" in _section(page, "m")
