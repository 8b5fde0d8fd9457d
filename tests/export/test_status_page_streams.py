"""A streaming model's row on the status page: its TTFT and ITL quantiles, output tokens/s
and TTFT/ITL SLOs, from a StreamBoard holding known samples; plain models as before."""

from __future__ import annotations

import re

import pytest

from tritonwatch.analysis.slo import (
    EventCounts,
    SliSource,
    SLOKind,
    SLOStatus,
    evaluate_slo,
    slo_specs,
)
from tritonwatch.config import parse_config
from tritonwatch.export.status_page import StatusSnapshot, headline, render_status_page
from tritonwatch.export.status_view import StatusInputs, status_snapshot
from tritonwatch.records.observations import Outcome, StreamResult
from tritonwatch.state.canary_board import SeriesSnapshot
from tritonwatch.state.stream_board import StreamBoard

CONFIG = """
slo: {{latency: {{threshold: 1s}}}}
targets:
  - name: t
    url: http://127.0.0.1:1
    models:
      - name: plain
      - name: llm
        slo: {{ttft: {{threshold: {ttft}, objective: 0.95}}, itl: {{threshold: {itl}, objective: 0.95}}}}
"""
NOW = 20.0
PLAIN = SeriesSnapshot("t", "plain", "http", {"success": 9}, (), 0.0, 9, {"5m": {0.95: 0.004}})
LLM = SeriesSnapshot("t", "llm", "http", {"success": 20}, (), 0.0, 20, {"5m": {0.95: 0.3}})


def _streams() -> StreamBoard:
    """20 streams ending at 1..20 s, each sent 1 s before: TTFT 5k ms, one gap of k ms,
    8 tokens (k = 1..20), so p50/p95/p99 are the 10th/19th/20th values and 160 tokens
    over the 20 s since the first was sent make 8 tokens/s."""
    stats = StreamBoard()
    stats.declare([("t", "llm", "http")])
    for k in range(1, 21):
        stats.record(
            StreamResult(
                "t", "llm", "http", float(k), Outcome.SUCCESS, 0.005 * k, (0.001 * k,), 8, 1.0,
                None,
            )
        )  # fmt: skip
    return stats


def _statuses(config_text: str, burning: SLOKind | None) -> list[SLOStatus]:
    """Every SLO of the config; TTFT's 5m window holds 3 bad of 20 (burn 3×) and 1 bad
    of 100 over the period (80 % of the budget left); ``burning`` pages (18 of 20 bad
    in both of the page's windows)."""
    statuses = []
    for spec in slo_specs(parse_config(config_text, "streams.yaml")):
        if spec.kind == burning:
            windows = {"5m": EventCounts(18, 20), "1h": EventCounts(18, 20)}
            statuses.append(evaluate_slo(spec, SliSource.CANARY, windows, EventCounts(18, 20)))
        elif spec.kind == SLOKind.TTFT:
            windows = {"5m": EventCounts(3, 20)}
            statuses.append(evaluate_slo(spec, SliSource.CANARY, windows, EventCounts(1, 100)))
        else:
            statuses.append(evaluate_slo(spec, SliSource.CANARY, {}, EventCounts(0, 0)))
    return statuses


def _snapshot(
    ttft: str = "200ms", itl: str = "50ms", burning: SLOKind | None = None
) -> StatusSnapshot:
    text = CONFIG.format(ttft=ttft, itl=itl)
    return status_snapshot(
        StatusInputs(
            config=parse_config(text, "streams.yaml"),
            canary=[LLM, PLAIN],
            readiness={},
            triton=[],
            sweeps={},
            slo_statuses=_statuses(text, burning),
            advice={},
            experiments=[],
            p95_history=lambda key: (),
            healthy=True,
            streams=_streams().snapshot(NOW),
        )
    )


def _section(html: str, model: str) -> str:
    return next(s for s in html.split('<section class="model"')[1:] if f'data-model="{model}"' in s)


def _measure_row(section: str, measure: str) -> str:
    row = re.search(rf'<tr class="stream-measure" data-measure="{measure}".*?</tr>', section)
    assert row is not None, f"no {measure} row"
    return row.group(0)


def _cells(row: str) -> list[str]:
    """The text of each cell that holds no chart."""
    return [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]


def test_a_streaming_row_shows_ttft_itl_tokens_and_each_measures_slo() -> None:
    """Breaks if a streaming row loses its 5-minute TTFT/ITL quantiles (in ms), its
    output tokens/s, or a TTFT/ITL SLO's budget bar and burn chart beside its measure."""
    snapshot = _snapshot()
    llm = next(m for m in snapshot.models if m.model == "llm")
    assert llm.stream is not None
    assert llm.stream.quantiles["ttft"] == pytest.approx({"p50": 0.05, "p90": 0.09,
                                                          "p95": 0.095, "p99": 0.1})  # fmt: skip
    assert llm.stream.output_tokens_per_second == 8.0
    section = _section(render_status_page(snapshot), "llm")
    ttft, itl = _measure_row(section, "ttft"), _measure_row(section, "itl")
    assert _cells(ttft)[:5] == [
        "TTFT (time to first token)", "50.0 ms", "95.0 ms", "100.0 ms", "200.0 ms",
    ]  # fmt: skip
    assert _cells(itl)[:5] == [
        "ITL (inter-token latency)", "10.00 ms", "19.00 ms", "20.00 ms", "50.00 ms",
    ]  # fmt: skip
    assert '<td class="p95 ok">95.0 ms</td>' in ttft
    assert 'data-budget-remaining="0.8' in ttft and "80.0% left" in ttft
    burn = re.search(r'data-window="5m" data-burn-rate="([^"]+)"', ttft)
    assert burn is not None and float(burn.group(1)) == pytest.approx(3.0)
    assert "no burn rate yet" in itl and "no events yet" in itl  # its SLO, without events
    assert "8.0 tokens/s</b> (160 tokens since start)" in section
    slo_table = section.split('<table class="slo">')[1]
    assert "latency (canary)" in slo_table and "ttft" not in slo_table  # not drawn twice


def test_a_plain_model_row_has_no_stream_numbers() -> None:
    """Breaks if a model that is not streamed gets a streaming table (or loses its
    ordinary quantiles)."""
    snapshot = _snapshot()
    plain = next(m for m in snapshot.models if m.model == "plain")
    assert plain.stream is None
    section = _section(render_status_page(snapshot), "plain")
    assert 'class="stream"' not in section and "tokens/s" not in section
    assert "canary p95 <span" in section and "4.0 ms" in section


def test_the_headline_counts_a_ttft_burn_and_a_stream_p95_over_its_threshold() -> None:
    """Breaks if a TTFT burn or a TTFT/ITL p95 over its SLO's threshold does not make a
    streaming model breach, or if one within its thresholds does."""
    assert headline(_snapshot()) == "0 of 2 models breaching their SLO"
    burning = _snapshot(burning=SLOKind.TTFT)
    assert headline(burning) == "1 of 2 models breaching their SLO"
    (llm,) = burning.breaching
    assert llm.breach_reasons() == [
        "ttft (canary) SLO burning (page: burn over 14.4× in both 1h and 5m)"
    ]
    slow_first_token = _snapshot(ttft="90ms")
    assert [m.breach_reasons() for m in slow_first_token.breaching] == [
        ["TTFT p95 95.0 ms over the 90.0 ms threshold"]
    ]
    assert '<td class="p95 breach">95.0 ms</td>' in render_status_page(slow_first_token)
    slow_tokens = _snapshot(itl="15ms")
    assert [m.breach_reasons() for m in slow_tokens.breaching] == [
        ["ITL p95 19.00 ms over the 15.00 ms threshold"]
    ]
