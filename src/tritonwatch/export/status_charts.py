"""The status page's small charts, as inline SVG strings (no scripts, no fonts, no URLs).

* :func:`p95_sparkline`: the canary's p95 over the last hour against the budget — a
  polyline, a dashed budget line, and the points over the budget as warning dots;
* :func:`budget_bar`: the error budget left over the SLO period;
* :func:`burn_chart`: the burn rate per window, with the 1× line (the budget would
  last exactly the period).

Each SVG is drawn in CSS pixels (``width``/``height`` equal the ``viewBox``), and carries
the numbers it was drawn from as ``data-*`` attributes, so a test (or a script) can map
coordinates back to seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

from tritonwatch.export.p95_history import P95Point

P95_COLOUR = "#1f6feb"
BUDGET_COLOUR = "#9a6700"
OVER_COLOUR = "#d1242f"
OK_COLOUR = "#1a7f37"
TRACK_COLOUR = "#eaeef2"
FRAME_COLOUR = "#d0d7de"
IDLE_BAR_COLOUR = "#8c959f"

SPARK_WIDTH, SPARK_HEIGHT = 320.0, 64.0
SPARK_LEFT, SPARK_RIGHT, SPARK_TOP, SPARK_BOTTOM = 4.0, 4.0, 6.0, 6.0
SPARK_HEADROOM = 1.15
"""The y axis reaches 15 % above the larger of the budget and the highest p95."""

BAR_WIDTH, BAR_HEIGHT = 160.0, 12.0
BURN_BAR, BURN_GAP, BURN_HEIGHT, BURN_LABEL = 22.0, 6.0, 48.0, 12.0


def _f(value: float) -> str:
    return f"{value:.2f}"


def spark_y(seconds: float, y_max_seconds: float) -> float:
    """Where ``seconds`` sits on the sparkline's y axis (0 at the bottom edge)."""
    plot = SPARK_HEIGHT - SPARK_TOP - SPARK_BOTTOM
    return SPARK_TOP + (1.0 - seconds / y_max_seconds) * plot


def spark_x(age_seconds: float, span_seconds: float) -> float:
    """Where a point ``age_seconds`` old sits; now is the right edge."""
    plot = SPARK_WIDTH - SPARK_LEFT - SPARK_RIGHT
    if span_seconds <= 0:
        return SPARK_LEFT + plot
    return SPARK_LEFT + (1.0 - age_seconds / span_seconds) * plot


def span_text(seconds: float) -> str:
    """``12 min``, ``45 s``: how far back the sparkline reaches."""
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def p95_sparkline(points: Sequence[P95Point], budget_seconds: float | None) -> str:
    """The p95 points (oldest first) against the budget (None: no latency SLO judges the
    model, as a stream judged by TTFT and ITL: no budget line); the x axis spans from the
    oldest point to now, so the first minutes after start fill the width too."""
    highest = max((p.p95_seconds for p in points), default=0.0)
    y_max = max(budget_seconds or 0.0, highest) * SPARK_HEADROOM or 1.0
    span = max((p.age_seconds for p in points), default=0.0) if len(points) > 1 else 0.0
    coords = [(spark_x(p.age_seconds, span), spark_y(p.p95_seconds, y_max)) for p in points]
    polyline = " ".join(f"{_f(x)},{_f(y)}" for x, y in coords)
    lone = (
        f'<circle class="p95" cx="{_f(coords[0][0])}" cy="{_f(coords[0][1])}" r="3"'
        f' fill="{P95_COLOUR}"/>'
        if len(coords) == 1
        else ""
    )  # a polyline of one point draws nothing
    over = "".join(
        f'<circle class="over" cx="{_f(x)}" cy="{_f(y)}" r="2.5" fill="{OVER_COLOUR}"/>'
        for (x, y), p in zip(coords, points, strict=True)
        if budget_seconds is not None and p.p95_seconds > budget_seconds
    )
    title = f"canary p95 over the last {span_text(span)}" + (
        " (no latency budget)"
        if budget_seconds is None
        else f" against the {budget_seconds * 1e3:.1f} ms budget"
    )
    budget = ""
    if budget_seconds is not None:
        budget_y = _f(spark_y(budget_seconds, y_max))
        budget = (
            f'<line class="budget" x1="{SPARK_LEFT:g}" x2="{SPARK_WIDTH - SPARK_RIGHT:g}"'
            f' y1="{budget_y}" y2="{budget_y}" stroke="{BUDGET_COLOUR}" stroke-width="2"'
            f' stroke-dasharray="6 4" shape-rendering="crispEdges"/>'
        )
    budget_data = "" if budget_seconds is None else f' data-budget-seconds="{budget_seconds!r}"'
    return (
        f'<svg class="sparkline" role="img"'
        f' width="{SPARK_WIDTH:g}" height="{SPARK_HEIGHT:g}"'
        f' viewBox="0 0 {SPARK_WIDTH:g} {SPARK_HEIGHT:g}"'
        f' data-y-max-seconds="{y_max!r}" data-span-seconds="{span!r}"'
        f"{budget_data}><title>{escape(title)}</title>"
        f'<rect x="0.5" y="0.5" width="{SPARK_WIDTH - 1:g}" height="{SPARK_HEIGHT - 1:g}"'
        f' fill="#ffffff" stroke="{FRAME_COLOUR}"/>{budget}'
        f'<polyline class="p95" points="{polyline}" fill="none" stroke="{P95_COLOUR}"'
        f' stroke-width="2.5" stroke-linejoin="round" stroke-linecap="round"/>'
        f"{lone}{over}</svg>"
    )


def budget_words(remaining: float) -> str:
    """The budget left as a person says it: ``62.5% left``, ``spent``, or, past that,
    how many budgets' worth went (``exhausted: 10× the budget spent``), never a
    percentage in the thousands."""
    if remaining > 0:
        return f"{remaining:.1%} left"
    used = 1.0 - remaining
    if used < 1.005:  # within rounding of exactly spent
        return "spent"
    times = f"{used:.3g}" if used < 10 else f"{used:,.0f}"
    return f"exhausted: {times}× the budget spent"


def budget_bar(remaining: float | None) -> str:
    """The error budget left (1 = untouched, 0 = spent, below 0 = overspent) as a bar."""
    if remaining is None:
        return '<span class="muted">no events yet</span>'
    filled = min(max(remaining, 0.0), 1.0) * BAR_WIDTH
    colour = OK_COLOUR if remaining > 0.5 else BUDGET_COLOUR if remaining > 0 else OVER_COLOUR
    label = budget_words(remaining)
    return (
        f'<svg class="budget-bar" role="img"'
        f' width="{BAR_WIDTH:g}" height="{BAR_HEIGHT:g}" viewBox="0 0 {BAR_WIDTH:g} {BAR_HEIGHT:g}"'
        f' data-budget-remaining="{remaining!r}"><title>{escape(label)}</title>'
        f'<rect width="{BAR_WIDTH:g}" height="{BAR_HEIGHT:g}" fill="{TRACK_COLOUR}"/>'
        f'<rect class="left" width="{_f(filled)}" height="{BAR_HEIGHT:g}" fill="{colour}"/>'
        f'</svg> <span class="budget-left">{escape(label)}</span>'
    )


def burn_chart(burn_rates: Mapping[str, float]) -> str:
    """One bar per window (in the order given), heights on a shared linear scale that
    always shows the 1× line; bars over 1× are in the warning colour."""
    if not burn_rates:
        return '<span class="muted">no burn rate yet</span>'
    y_max = max(2.0, *burn_rates.values()) * 1.1
    width = len(burn_rates) * (BURN_BAR + BURN_GAP) + BURN_GAP
    height = BURN_HEIGHT + BURN_LABEL

    def top(rate: float) -> float:
        return BURN_HEIGHT * (1.0 - min(rate, y_max) / y_max)

    bars = []
    for index, (window, rate) in enumerate(burn_rates.items()):
        x = BURN_GAP + index * (BURN_BAR + BURN_GAP)
        colour = OVER_COLOUR if rate > 1.0 else IDLE_BAR_COLOUR
        y = top(rate)
        bars.append(
            f'<g class="burn" data-window="{escape(window)}" data-burn-rate="{rate!r}">'
            f"<title>{escape(window)}: {rate:.2f}× the sustainable rate</title>"
            f'<rect x="{_f(x)}" y="{_f(y)}" width="{BURN_BAR:g}" height="{_f(BURN_HEIGHT - y)}"'
            f' fill="{colour}"/>'
            f'<text x="{_f(x + BURN_BAR / 2)}" y="{height - 2:g}" font-size="9"'
            f' text-anchor="middle" font-family="sans-serif">{escape(window)}</text></g>'
        )
    one = _f(top(1.0))
    return (
        f'<svg class="burn-rates" role="img"'
        f' width="{width:g}" height="{height:g}" viewBox="0 0 {width:g} {height:g}"'
        f' data-y-max="{y_max!r}">{"".join(bars)}'
        f'<line class="one" x1="0" x2="{width:g}" y1="{one}" y2="{one}" stroke="{BUDGET_COLOUR}"'
        f' stroke-dasharray="3 2"/></svg>'
    )
