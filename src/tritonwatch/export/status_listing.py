"""Which models the status page shows in full, and the one-line summary of the rest.

A page that draws every model in full grows with the fleet: at a thousand models it
would carry a thousand sections, charts and tables. So:

* a model that needs a look — it breaches its SLO (:meth:`ModelStatus.breach_reasons`),
  has advice, has advice blocked, or refuses the canary's input — gets its full section,
  breaching ones first, up to :data:`NOTABLE_SECTIONS`;
* while the whole fleet is small (:data:`FULL_PAGE_MODELS` models or fewer) every model
  gets its full section, as it always did;
* every other model is one row of a summary table (p95 against its budget, availability
  of its canary, bottleneck), :data:`ROWS_PER_PAGE` rows a page, ``/?page=N`` for the next.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from tritonwatch.export.status_records import ModelStatus, format_ms
from tritonwatch.records.observations import NOT_THE_SERVERS, Outcome

FULL_PAGE_MODELS = 20
NOTABLE_SECTIONS = 50
ROWS_PER_PAGE = 100


def needs_a_look(status: ModelStatus) -> bool:
    """The model breaches, has advice (or advice it cannot get), or refuses the canary."""
    return bool(
        status.breach_reasons()
        or status.recommendations
        or status.advice_blocked
        or status.input_refused
    )


@dataclass(frozen=True, slots=True)
class Listing:
    """What one page shows: full sections, summary rows, and where the rows are."""

    sections: Sequence[ModelStatus]
    rows: Sequence[ModelStatus]
    page: int
    pages: int
    summarised: int
    """Models shown as a summary row over every page."""


def listing(models: Sequence[ModelStatus], page: int = 1) -> Listing:
    """The models of ``page`` (1-based; one past the end shows the last page)."""
    if len(models) <= FULL_PAGE_MODELS:
        return Listing(tuple(models), (), 1, 1, 0)
    notable = sorted((m for m in models if needs_a_look(m)), key=lambda m: not m.breach_reasons())
    sections = notable[:NOTABLE_SECTIONS]
    shown = {(m.target, m.model, m.protocol) for m in sections}
    rest = [m for m in models if (m.target, m.model, m.protocol) not in shown]
    pages = max(1, -(-len(rest) // ROWS_PER_PAGE))
    page = min(max(page, 1), pages)
    start = (page - 1) * ROWS_PER_PAGE
    return Listing(sections, rest[start : start + ROWS_PER_PAGE], page, pages, len(rest))


def _availability(status: ModelStatus) -> str:
    counted = {o: n for o, n in status.outcomes.items() if o not in NOT_THE_SERVERS}
    total = sum(counted.values())
    if total == 0:
        return "—"
    return f"{100 * counted.get(Outcome.SUCCESS, 0) / total:.2f}%"


def _row(status: ModelStatus) -> str:
    p95 = status.quantiles.get("p95")
    budget = status.budget_seconds
    over = p95 is not None and budget is not None and p95 > budget
    state = "breach" if status.breach_reasons() else "ok"
    return (
        f'<tr class="model-row" data-model="{escape(status.model)}">'
        f"<td>{escape(status.target)}/{escape(status.model)}</td>"
        f'<td class="{"breach" if over else "ok"}">{format_ms(p95)}</td>'
        f"<td>{format_ms(budget)}</td><td>{_availability(status)}</td>"
        f"<td>{escape(status.bottleneck or '—')}</td>"
        f'<td class="{state}">{"breaching" if state == "breach" else "ok"}</td></tr>'
    )


def summary_table(shown: Listing) -> str:
    """The page's summary rows and the links to the other pages ('' when none)."""
    if not shown.rows:
        return ""
    head = (
        "<tr><th>model</th><th>p95 (5m)</th><th>budget</th><th>availability</th>"
        "<th>bottleneck</th><th>SLO</th></tr>"
    )
    links = " ".join(
        f"<b>{n}</b>" if n == shown.page else f'<a href="/?page={n}">{n}</a>'
        for n in range(1, shown.pages + 1)
    )
    return (
        f'<section class="summary"><h2>{shown.summarised} more models, in short</h2>'
        f"<p>Those that breach, have advice or refuse the canary are drawn in full above; "
        f"page {shown.page} of {shown.pages}: {links}</p>"
        f"<table>{head}{''.join(_row(m) for m in shown.rows)}</table></section>"
    )
