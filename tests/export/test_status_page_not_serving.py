"""The status page names a model that is not serving, with its last error and how many
requests failed, and says a spent budget in words."""

from __future__ import annotations

from tritonwatch.analysis.serving import NotServing
from tritonwatch.analysis.slo import BURN_POLICY, WINDOWS, SliSource, SLOKind, SLOSpec, SLOStatus
from tritonwatch.config import parse_config
from tritonwatch.export.status_page import (
    ModelStatus,
    SloLine,
    StatusSnapshot,
    render_status_page,
)
from tritonwatch.export.status_view import StatusInputs, status_snapshot
from tritonwatch.state.canary_board import LastError, SeriesSnapshot

DEVICE_LOST = "[500] device lost after load"


def _model(not_serving: NotServing | None, remaining: float | None = None) -> ModelStatus:
    spec = SLOSpec("t", "m", SLOKind.AVAILABILITY, 0.999, 28 * 86400.0)
    ratio = None if remaining is None else (1 - remaining) * spec.error_budget
    status = SLOStatus(spec, SliSource.CANARY, dict.fromkeys(WINDOWS, 1.0), ratio, BURN_POLICY[0])
    return ModelStatus(
        "t", "m", "http", True, 0.05, {}, {"http_error": 75},
        slos=[SloLine.of(status)], not_serving=not_serving,
    )  # fmt: skip


def test_a_model_not_serving_shows_its_last_error_and_failed_count() -> None:
    """Breaks if a ready model failing every request is not named on its row, lacks the
    last error or the count, or does not count as breaching in the headline."""
    error = LastError("http_error", DEVICE_LOST, 100.0, 1_700_000_000.0)
    verdict = NotServing("t", "m", 25.0, 75.0, 75, error)
    page = render_status_page(StatusSnapshot([_model(verdict)]))
    assert '<p class="not-serving breach" data-failed="75">' in page
    assert "the last 75 canary requests failed (for 75 s)" in page
    assert f'<code class="error">{DEVICE_LOST}</code>' in page
    assert 'data-breaching="1"' in page
    assert "not serving" not in render_status_page(StatusSnapshot([_model(None)]))


def test_a_budget_burnt_a_thousandfold_reads_as_budgets_spent() -> None:
    """Breaks if a budget spent 1000 times over reads "overspent by 99900.0%" (the
    issue's status page) instead of in words a person reads."""
    page = render_status_page(StatusSnapshot([_model(None, remaining=-999.0)]))
    assert "exhausted: 1,000× the budget spent" in page
    assert "overspent" not in page and "99900" not in page


def test_the_view_puts_the_verdict_on_every_row_of_its_model() -> None:
    """Breaks if status_snapshot drops the findings' not-serving verdicts or puts one on
    another model's rows."""
    config = parse_config(
        "targets: [{name: t, url: 'http://127.0.0.1:1', models: [{name: m}, {name: n}]}]",
        "view.yaml",
    )
    rows = [
        SeriesSnapshot("t", model, protocol, {}, (), 0.0, 0, {})
        for model in ("m", "n")
        for protocol in ("http", "grpc")
    ]
    verdict = NotServing("t", "m", 25.0, 75.0, 75, None)
    snapshot = status_snapshot(
        StatusInputs(
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
            not_serving=[verdict],
        )
    )
    found = {(m.model, m.protocol): m.not_serving for m in snapshot.models}
    assert found == {
        ("m", "http"): verdict, ("m", "grpc"): verdict, ("n", "http"): None, ("n", "grpc"): None,
    }  # fmt: skip
