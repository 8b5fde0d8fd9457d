"""The status page's sparkline, budget bar, burn-rate chart, headline and advice, checked
as values: coordinates map back to the seconds they were drawn from."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from tritonwatch.analysis.slo import EventCounts, SliSource, SLOKind, SLOSpec, evaluate_slo
from tritonwatch.export.p95_history import P95Point
from tritonwatch.export.status_charts import (
    BAR_WIDTH,
    BUDGET_COLOUR,
    BURN_HEIGHT,
    OVER_COLOUR,
    P95_COLOUR,
    SPARK_LEFT,
    SPARK_RIGHT,
    SPARK_WIDTH,
    budget_bar,
    burn_chart,
    p95_sparkline,
    spark_y,
)
from tritonwatch.export.status_page import (
    AdviceLine,
    ModelStatus,
    SloLine,
    StatusSnapshot,
    headline,
    render_status_page,
)
from tritonwatch.state.canary_board import LastError

pytestmark = pytest.mark.sim

Element = tuple[str, dict[str, str]]


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[Element] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, {k: v or "" for k, v in attrs}))


def _elements(html: str) -> list[Element]:
    parser = _Elements()
    parser.feed(html)
    return parser.found


def _one(html: str, tag: str, cls: str) -> dict[str, str]:
    matches = [a for t, a in _elements(html) if t == tag and cls in a.get("class", "").split()]
    assert len(matches) == 1, f"{len(matches)} <{tag} class={cls}>"
    return matches[0]


def _unspark_y(y: float, y_max: float) -> float:
    """Seconds from a sparkline y coordinate (the inverse of spark_y)."""
    top, bottom = spark_y(y_max, y_max), spark_y(0.0, y_max)
    return (bottom - y) / (bottom - top) * y_max


POINTS = (P95Point(600.0, 0.020), P95Point(300.0, 0.065), P95Point(0.0, 0.031))


def test_the_polyline_points_map_back_to_the_p95_values_and_their_ages() -> None:
    """Breaks if a sparkline point is drawn at another p95 (or time) than it was given,
    or the y axis is not linear from 0 at the bottom."""
    svg = p95_sparkline(POINTS, 0.050)
    root = _one(svg, "svg", "sparkline")
    y_max, span = float(root["data-y-max-seconds"]), float(root["data-span-seconds"])
    assert y_max == pytest.approx(0.065 * 1.15)  # headroom above the highest point
    assert span == 600.0
    pairs = [
        tuple(map(float, p.split(","))) for p in _one(svg, "polyline", "p95")["points"].split()
    ]
    assert [_unspark_y(y, y_max) for _, y in pairs] == pytest.approx(
        [p.p95_seconds for p in POINTS], abs=y_max / 5000
    )
    plot = SPARK_WIDTH - SPARK_LEFT - SPARK_RIGHT
    assert [x for x, _ in pairs] == pytest.approx(
        [SPARK_LEFT, SPARK_LEFT + plot / 2, SPARK_LEFT + plot]
    )
    assert _one(svg, "polyline", "p95")["stroke"] == P95_COLOUR


def test_the_budget_line_sits_at_the_budget_and_only_points_over_it_are_marked() -> None:
    """Breaks if the dashed budget line is drawn at another value than the budget, or a
    point within the budget gets the warning dot (or one over it does not)."""
    svg = p95_sparkline(POINTS, 0.050)
    y_max = float(_one(svg, "svg", "sparkline")["data-y-max-seconds"])
    line = _one(svg, "line", "budget")
    assert line["y1"] == line["y2"]
    assert _unspark_y(float(line["y1"]), y_max) == pytest.approx(0.050, abs=y_max / 5000)
    assert line["stroke"] == BUDGET_COLOUR and line["stroke-dasharray"]
    dots = [a for t, a in _elements(svg) if t == "circle" and a.get("class") == "over"]
    assert len(dots) == 1
    assert _unspark_y(float(dots[0]["cy"]), y_max) == pytest.approx(0.065, abs=y_max / 5000)
    assert dots[0]["fill"] == OVER_COLOUR


def test_a_budget_above_every_point_still_fits_on_the_chart() -> None:
    """Breaks if the y axis follows the points only, putting the budget line off the chart."""
    svg = p95_sparkline((P95Point(30.0, 0.002), P95Point(0.0, 0.003)), 0.050)
    y_max = float(_one(svg, "svg", "sparkline")["data-y-max-seconds"])
    assert y_max == pytest.approx(0.050 * 1.15)
    assert (
        0
        < float(_one(svg, "line", "budget")["y1"])
        < float(_one(svg, "svg", "sparkline")["height"])
    )
    assert "circle" not in svg


@pytest.mark.parametrize(
    ("remaining", "width", "label"),
    [(0.75, 0.75 * BAR_WIDTH, "75.0% left"), (1.0, BAR_WIDTH, "100.0% left"),
     (-0.4, 0.0, "exhausted: 1.4× the budget spent"), (0.0, 0.0, "spent"),
     (-999.0, 0.0, "exhausted: 1,000× the budget spent")],
)  # fmt: skip
def test_the_budget_bar_is_as_long_as_the_budget_left(
    remaining: float, width: float, label: str
) -> None:
    """Breaks if the bar's length is not the fraction of the error budget left (clamped
    to the track), or an overspent budget reads as a positive amount left or as a
    percentage in the thousands ("overspent by 99900.0%") instead of budgets spent."""
    html = budget_bar(remaining)
    assert float(_one(html, "rect", "left")["width"]) == pytest.approx(width, abs=0.01)
    assert float(_one(html, "svg", "budget-bar")["data-budget-remaining"]) == remaining
    assert f'<span class="budget-left">{label}</span>' in html


def test_burn_bars_are_proportional_and_over_one_is_a_warning() -> None:
    """Breaks if burn-rate bars are not to one linear scale, lose their window, or a
    burn over 1× (the budget runs out before the period ends) is not flagged."""
    html = burn_chart({"5m": 20.0, "1h": 10.0, "3d": 0.5})
    groups = re.findall(r'<g class="burn" data-window="([^"]+)" data-burn-rate="([^"]+)">.*?'
                        r'<rect [^>]*height="([^"]+)" fill="([^"]+)"', html)  # fmt: skip
    assert [(w, float(r)) for w, r, _, _ in groups] == [("5m", 20.0), ("1h", 10.0), ("3d", 0.5)]
    heights = {w: float(h) for w, _, h, _ in groups}
    assert heights["5m"] == pytest.approx(2 * heights["1h"], abs=0.02)
    assert heights["1h"] == pytest.approx(20 * heights["3d"], abs=0.2)
    assert heights["5m"] == pytest.approx(BURN_HEIGHT / 1.1, abs=0.01)
    assert [fill for *_, fill in groups] == [OVER_COLOUR, OVER_COLOUR, "#8c959f"]


def _status(model: str, p95: float | None, **kwargs: object) -> ModelStatus:
    quantiles = {} if p95 is None else {"p50": p95 / 2, "p95": p95, "p99": p95 * 1.2}
    return ModelStatus("sim", model, "http", True, 0.050, quantiles, {"success": 10}, **kwargs)  # type: ignore[arg-type]


def _firing_latency_slo() -> SloLine:
    spec = SLOSpec("sim", "b", SLOKind.LATENCY, 0.95, 28 * 86400.0, 0.050)
    windows = {w: EventCounts(bad=80.0, total=100.0) for w in ("5m", "30m", "1h", "6h")}
    windows["1d"] = EventCounts(0.0, 0.0)  # no events: no burn rate, not 0
    return SloLine.of(evaluate_slo(spec, SliSource.CANARY, windows, EventCounts(80.0, 100.0)))


def test_slo_line_of_a_firing_status_names_the_condition() -> None:
    """Breaks if the page loses which burn-rate condition fires, the budget left, or the
    windows without events are shown as a zero burn."""
    line = _firing_latency_slo()
    assert line.name == "latency (canary)"
    assert line.firing == "page: burn over 14.4× in both 1h and 5m"
    assert line.burn_rates == pytest.approx({"5m": 16.0, "30m": 16.0, "1h": 16.0, "6h": 16.0})
    assert line.budget_remaining == pytest.approx(-15.0)


def test_headline_counts_models_over_budget_or_burning() -> None:
    """Breaks if the headline counts a model with no data, misses one whose p95 is fine
    but whose SLO burns, or says only whether the daemon is healthy."""
    snapshot = StatusSnapshot(
        [
            _status("a", 0.080),  # p95 over the budget
            _status("b", 0.010, slos=[_firing_latency_slo()]),  # a burn-rate alert
            _status("c", 0.010, slos=[SloLine("latency (canary)", 0.95, {"5m": 0.4}, 0.9)]),
            _status("d", None),  # no data yet
        ],
        healthy=True,
    )
    assert headline(snapshot) == "2 of 4 models breaching their SLO"
    html = render_status_page(snapshot)
    assert re.search(r'<h1 class="headline" data-breaching="2" data-models="4">\s*'
                     r'<span class="breach">2 of 4 models breaching their SLO</span></h1>', html)  # fmt: skip
    assert 'daemon <span class="ok">healthy</span>' in html
    verdicts = re.findall(
        r'data-model="(\w)".*?<p class="verdict ([a-z ]+)">([^<]*)</p>', html, re.S
    )
    assert verdicts == [
        ("a", "breach", "breaching: p95 80.0 ms over the 50.0 ms budget"),
        (
            "b",
            "breach",
            "breaching: latency (canary) SLO burning (page: burn over 14.4× in both 1h and 5m)",
        ),
        ("c", "ok", "within SLO"),
        ("d", "muted", "no data yet"),
    ]


@pytest.mark.parametrize(
    ("models", "text"),
    [(0, "no models configured"), (1, "0 of 1 model breaching their SLO"),
     (3, "0 of 3 models breaching their SLO")],
)  # fmt: skip
def test_headline_when_nothing_breaches(models: int, text: str) -> None:
    """Breaks if a calm fleet's headline miscounts or reads as a breach."""
    snapshot = StatusSnapshot([_status(f"m{i}", 0.01) for i in range(models)])
    assert headline(snapshot) == text
    assert f'<span class="ok">{text}</span>' in render_status_page(snapshot)


def test_recommendation_shows_action_reason_and_evidence_in_units() -> None:
    """Breaks if a recommendation loses its reason or evidence, or shows seconds and
    shares as bare floats instead of milliseconds and percentages."""
    advice = AdviceLine("lower", "max_queue_delay_microseconds", "80000", "40000",
                        "p95 85.0 ms is over the 50.0 ms budget", "ticket",
                        {"p95_seconds": 0.085, "queue_share": 0.9, "max_batch_size": 32.0},
                        "requests wait up to 40.0 ms less")  # fmt: skip
    html = render_status_page(StatusSnapshot([_status("a", 0.085, recommendations=[advice])]))
    item = re.search(r'<li class="recommendation">.*?</li>', html, re.S)
    assert item is not None
    text = item.group(0)
    assert "[ticket] <b>lower</b> max_queue_delay_microseconds: 80000 → 40000" in text
    assert "p95 85.0 ms is over the 50.0 ms budget" in text
    assert "(requests wait up to 40.0 ms less)" in text
    evidence = dict(re.findall(r"<dt>([^<]+)</dt><dd>([^<]+)</dd>", text))
    assert evidence == {"p95_seconds": "85.00 ms", "queue_share": "90.0%", "max_batch_size": "32"}


def _full_page() -> str:
    last = LastError("timeout", "deadline 1.0 s exceeded", 5.0, 1_700_000_000.0, age_seconds=3.0)
    return render_status_page(
        StatusSnapshot([
            _status("a", 0.080, slos=[_firing_latency_slo()], p95_history=POINTS, last_error=last,
                    recommendations=[AdviceLine("lower", "x", "2", "1", "why", "info", {"a_seconds": 1.0})]),
            _status("b", 0.01, p95_history=POINTS[:1]),
        ])
    )  # fmt: skip


def test_the_page_loads_nothing_from_anywhere() -> None:
    """Breaks if the page pulls a script, font, stylesheet or image from another host
    (or any script at all): it must render offline, behind an auth proxy, as it is."""
    html = _full_page()
    links = [
        value
        for _, attrs in _elements(html)
        for name, value in attrs.items()
        if name in {"src", "href", "xlink:href", "srcset", "action"}
    ]
    assert links == ["/metrics", "/health"]
    assert "<script" not in html.lower()
    assert "@import" not in html and "url(" not in html and "@font-face" not in html
    assert "<link" not in html.lower()


def test_each_model_has_its_sparkline_and_last_error() -> None:
    """Breaks if a model's section loses its p95 sparkline (or its caption's numbers),
    or a model without history gets an empty chart instead of saying so."""
    html = _full_page()
    a, b = html.split('<section class="model"')[1:]
    assert a.count('<svg class="sparkline"') == 1
    assert "canary p95, last 10 min: now 31.0 ms, highest 65.0 ms; dashed: the 50.0 ms budget" in a
    assert 'class="last-error"' in a and "deadline 1.0 s exceeded" in a
    assert a.count('<svg class="budget-bar"') == 1 and a.count('<svg class="burn-rates"') == 1
    assert b.count('<svg class="sparkline"') == 1  # one point: a dot at now, still a chart
    assert "last-error" not in b
    empty = render_status_page(StatusSnapshot([_status("c", 0.01)]))
    assert "no p95 history yet" in empty and "sparkline" not in empty
