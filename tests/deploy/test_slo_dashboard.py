"""The SLO overview dashboard shows streaming models' TTFT and ITL SLOs, told apart by the
``slo`` label, beside latency and availability."""

from __future__ import annotations

from tritonwatch.dashboards import expressions, slo

SLO_FAMILIES = (
    "tritonwatch:slo_burn_rate:ratio",
    "tritonwatch_slo_error_budget_remaining_ratio",
)


def _slo_targets() -> list[tuple[str, dict[str, str]]]:
    """(panel title, query) of every panel query reading an SLO family."""
    return [
        (panel["title"], target)
        for panel in slo.build()["panels"]
        for target in panel.get("targets", [])
        if target["expr"].startswith(SLO_FAMILIES)
    ]


def test_every_slo_panel_names_the_slo_in_its_legend_and_keeps_all_kinds() -> None:
    """Breaks if an SLO panel drops the ``slo`` label from its legend (TTFT and ITL rows
    would merge with latency ones) or filters the SLOs down to latency/availability."""
    targets = _slo_targets()
    assert len(targets) >= 4
    for title, target in targets:
        assert "{{slo}}" in target["legendFormat"], title
        assert "latency" not in target["expr"] and "availability" not in target["expr"], title


def test_a_row_shows_the_ttft_and_itl_burn_and_budget() -> None:
    """Breaks if the streaming row is gone or reads other SLOs than TTFT and ITL."""
    streaming = {
        where: expr for where, expr in expressions(slo.build()) if 'slo=~"ttft|itl"' in expr
    }
    assert sorted(streaming) == [
        "TTFT and ITL burn rate (1h and 5m) [A]",
        "TTFT and ITL error budget remaining [A]",
    ]
    assert 'window=~"1h|5m"' in streaming["TTFT and ITL burn rate (1h and 5m) [A]"]
