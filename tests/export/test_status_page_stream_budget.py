"""The status page judges a streamed model as its SLOs do: no latency budget for the
whole stream unless ``slo.latency`` is written, so a healthy LLM does not read as
breaching the 50 ms single-request default."""

from __future__ import annotations

from tritonwatch.config import parse_config
from tritonwatch.export.p95_history import P95Point
from tritonwatch.export.status_page import StatusSnapshot, headline, render_status_page
from tritonwatch.export.status_view import StatusInputs, status_snapshot
from tritonwatch.records.observations import Outcome, StreamResult
from tritonwatch.state.canary_board import SeriesSnapshot
from tritonwatch.state.stream_board import StreamBoard

ZERO_CONFIG = """
targets:
  - name: t
    url: http://127.0.0.1:1
    models: [{name: plain}, {name: llm}]
"""
WHOLE_STREAM = 0.095
"""16 tokens: 20 ms to the first, then 5 ms each (tests/triton_models/llm_stream)."""
PLAIN = SeriesSnapshot("t", "plain", "http", {"success": 9}, (), 0.0, 9, {"5m": {0.95: 0.004}})
LLM = SeriesSnapshot("t", "llm", "http", {"success": 20}, (), 0.0, 20, {"5m": {0.95: WHOLE_STREAM}})


def _streams() -> StreamBoard:
    board = StreamBoard()
    board.declare([("t", "llm", "http")])
    for k in range(1, 21):
        board.record(
            StreamResult(
                "t",
                "llm",
                "http",
                float(k),
                Outcome.SUCCESS,
                0.02,
                (0.005,) * 15,
                16,
                WHOLE_STREAM,
                0.005,
            )
        )
    return board


def _snapshot(config_text: str, streamed: bool = True) -> StatusSnapshot:
    history = [P95Point(60.0, WHOLE_STREAM), P95Point(0.0, WHOLE_STREAM)]
    return status_snapshot(
        StatusInputs(
            config=parse_config(config_text, "page.yaml"),
            canary=[LLM, PLAIN],
            readiness={},
            triton=[],
            sweeps={},
            slo_statuses=[],
            advice={},
            experiments=[],
            p95_history=lambda key: history,
            healthy=True,
            streams=_streams().snapshot(21.0) if streamed else [],
        )
    )


def _section(html: str, model: str) -> str:
    return next(s for s in html.split('<section class="model"')[1:] if f'data-model="{model}"' in s)


def test_a_streamed_model_has_no_latency_budget_and_does_not_breach_by_its_length() -> None:
    """Breaks if a healthy stream (95 ms) is shown breaching the 50 ms latency default,
    or its sparkline draws a budget no SLO holds; a plain model keeps its budget."""
    snapshot = _snapshot(ZERO_CONFIG)
    llm, plain = snapshot.models
    assert llm.budget_seconds is None
    assert plain.budget_seconds == 0.05
    assert llm.breach_reasons() == []
    assert headline(snapshot) == "0 of 2 models breaching their SLO"
    section = _section(render_status_page(snapshot), "llm")
    assert "the whole stream, no latency SLO (TTFT and ITL judge a stream)" in section
    assert 'class="budget"' not in section.split('<figure class="p95-history">')[1]
    assert "data-budget-seconds" not in section and "dashed" not in section
    assert "(no latency budget)" in section


def test_a_written_latency_or_an_unstreamed_model_keeps_the_budget() -> None:
    """Breaks if a written slo.latency stops judging the stream on the page, or a model
    not (yet) found streaming loses its latency budget."""
    written = _snapshot(ZERO_CONFIG + "slo: {latency: {threshold: 80ms}}\n")
    llm = written.models[0]
    assert llm.budget_seconds == 0.08
    assert llm.breach_reasons() == ["p95 95.0 ms over the 80.0 ms budget"]
    not_yet = _snapshot(ZERO_CONFIG, streamed=False).models[0]
    assert not_yet.budget_seconds == 0.05
