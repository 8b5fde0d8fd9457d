"""The status page at a thousand models (export/status_listing.py): the models that need
a look drawn in full, breaching ones first; the rest one summary row each, a hundred a
page; a small fleet drawn in full as before."""

from __future__ import annotations

import re

from tritonwatch.analysis.advisor_records import Action, Recommendation
from tritonwatch.analysis.slo import Severity
from tritonwatch.export.status_listing import FULL_PAGE_MODELS, ROWS_PER_PAGE, listing
from tritonwatch.export.status_page import (
    AdviceLine,
    ModelStatus,
    StatusSnapshot,
    render_status_page,
)

BUDGET = 0.05


def _model(index: int, p95: float = 0.01, advice: bool = False) -> ModelStatus:
    advice_lines = ()
    if advice:
        recommendation = Recommendation(
            target="t",
            model=f"m{index:04d}",
            action=Action.ADD_INSTANCE,
            parameter="instance_group.count",
            current=1,
            proposed=2,
            severity=Severity.INFO,
            reason="GPU idle while requests queue",
            evidence={},
            expected_effect="e",
            config_change=True,
        )
        advice_lines = (AdviceLine.of(recommendation),)
    return ModelStatus(
        "t",
        f"m{index:04d}",
        "http",
        True,
        BUDGET,
        {"p50": p95 / 2, "p95": p95, "p99": p95},
        {"success": 999, "timeout": 1},
        bottleneck="balanced",
        recommendations=advice_lines,
    )


def _fleet(size: int, slow: set[int], advised: set[int]) -> list[ModelStatus]:
    return [_model(i, p95=0.2 if i in slow else 0.01, advice=i in advised) for i in range(size)]


def _sections(page: str) -> list[str]:
    return re.findall(r'<section class="model"[^>]*data-model="([^"]+)"', page)


def test_a_small_fleet_is_drawn_in_full() -> None:
    models = _fleet(FULL_PAGE_MODELS, slow={3}, advised=set())
    shown = listing(models)
    assert list(shown.sections) == models and not shown.rows


def test_a_thousand_models_draw_the_ones_that_need_a_look_first_and_summarise_the_rest() -> None:
    models = _fleet(1000, slow={700, 5}, advised={300})
    page = render_status_page(StatusSnapshot(models))
    # Breaching models first (in fleet order), then those with advice.
    assert [m.model for m in listing(models).sections] == ["m0005", "m0700", "m0300"]
    assert 'data-breaching="2" data-models="1000"' in page
    rows = re.findall(r'<tr class="model-row" data-model="([^"]+)"', page)
    assert len(rows) == ROWS_PER_PAGE
    assert rows[0] == "m0000" and "m0005" not in rows and "m0300" not in rows
    assert "997 more models, in short" in page
    assert 'href="/?page=10"' in page and "page 1 of 10" in page
    # A healthy row's numbers: p95 and budget in ms, the canary's availability.
    row = page[page.index('data-model="m0000"') :].split("</tr>")[0]
    assert "10.0 ms" in row and "50.0 ms" in row and "99.90%" in row and ">ok<" in row
    assert len(page) < 200_000


def test_the_last_page_holds_the_remainder_and_a_page_past_the_end_is_the_last() -> None:
    models = _fleet(1000, slow={5}, advised=set())
    last = listing(models, page=10)
    assert (last.page, last.pages, len(last.rows)) == (10, 10, 99)
    assert [m.model for m in last.rows][-1] == "m0999"
    assert listing(models, page=99).page == 10
    assert listing(models, page=0).page == 1
    tenth = render_status_page(StatusSnapshot(models), page=10)
    assert "page 10 of 10" in tenth and 'data-model="m0999"' in tenth


def test_the_exporter_hands_the_page_number_to_the_status_page() -> None:
    from prometheus_client import CollectorRegistry

    from tritonwatch.export.http_server import HealthReport, exporter_app

    app = exporter_app(CollectorRegistry(), lambda: HealthReport(True), lambda n: f"page {n}")

    def get(query: str) -> str:
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "QUERY_STRING": query}
        return b"".join(app(environ, lambda status, headers: None)).decode()  # type: ignore[arg-type]

    assert get("page=3") == "page 3"
    assert get("") == "page 1"
    assert get("page=-2") == get("page=x") == "page 1"
