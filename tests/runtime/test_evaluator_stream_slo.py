"""The daemon's evaluation path for streaming SLOs: StreamResults in, a TTFT burn alert out
to a real webhook receiver on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from alerting_support import WebhookReceiver
from tritonwatch.config import parse_config
from tritonwatch.export.alerts import active_alerts
from tritonwatch.records.observations import Outcome, StreamResult
from tritonwatch.runtime.evaluator import Evaluator
from tritonwatch.scrape.triton_scrapers import TritonScrapers
from tritonwatch.state.canary_board import CanaryBoard, latency_buckets
from tritonwatch.state.stream_board import ITL_DEFAULT_BUCKETS, TTFT_DEFAULT_BUCKETS, StreamBoard

CONFIG = """
alerting: {{webhook_url: "{url}"}}
slo: {{ttft: {{threshold: 400ms, objective: 0.95}}, itl: {{threshold: 50ms}}}}
targets:
  - name: llm
    url: http://127.0.0.1:1
    models: [{{name: gen}}]
"""
WALL = 1_700_000_000.0


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    webhook = WebhookReceiver()
    yield webhook
    webhook.close()


def _evaluator(receiver: WebhookReceiver, first_tokens: tuple[float, ...]) -> Evaluator:
    """Evaluator over a StreamBoard that timed one stream per first token, 20 ms gaps."""
    config = parse_config(CONFIG.format(url=receiver.url), "stream.yaml")
    streams = StreamBoard(
        latency_buckets([0.4], TTFT_DEFAULT_BUCKETS), latency_buckets([0.05], ITL_DEFAULT_BUCKETS)
    )
    streams.declare([("llm", "gen", "http")])
    for index, ttft in enumerate(first_tokens):
        gaps = (0.02, 0.02, 0.02)
        at = float(index)
        streams.record(
            StreamResult("llm", "gen", "http", at, Outcome.SUCCESS, ttft, gaps, 4, 1.0, None)
        )
    return Evaluator(
        config,
        canary_board=CanaryBoard(),
        triton=TritonScrapers(),
        judged_states=list,  # nothing scraped
        registry=CollectorRegistry(),
        stream_board=streams,
        clock=lambda: 100.0,
        wall_clock=lambda: WALL,
    )


def _firing(evaluator: Evaluator) -> dict[str, str | None]:
    """Each SLO with events and the severity of its firing burn condition, if any."""
    return {
        str(s.spec.kind): None if s.firing is None else str(s.firing.severity)
        for s in evaluator.statuses()
    }


def test_slow_first_tokens_send_a_ttft_page_with_the_rules_labels(
    receiver: WebhookReceiver,
) -> None:
    """Breaks if evaluate() does not feed the stream histograms to the SLOs, or the TTFT
    burn alert lacks the labels of the generated rule or says a bare "ttft"."""
    evaluator = _evaluator(receiver, (0.6,) * 18 + (0.1,) * 2)  # 90 % slow: 18× the budget
    evaluator.start("http://127.0.0.1:9100/")
    try:
        evaluator.evaluate()
        assert _firing(evaluator) == {"ttft": "page", "itl": None}
        alert = receiver.wait_for("the TTFT burn alert", lambda a: True)
    finally:
        evaluator.stop()
    assert alert["labels"] == {
        "alertname": "TritonSLOBurn",
        "severity": "page",
        "target": "llm",
        "model": "gen",
        "slo": "ttft",
        "source": "canary",
    }
    assert alert["annotations"]["summary"] == (
        "gen on llm is burning its TTFT (time to first token) error budget (page)"
    )
    assert alert["annotations"]["runbook_url"] == "docs/runbook.md#tritonsloburn"
    assert [a["labels"]["slo"] for a in receiver.alerts()] == ["ttft"]


def test_fast_first_tokens_raise_no_alert(receiver: WebhookReceiver) -> None:
    """Breaks if streams well inside both budgets make the TTFT or ITL SLO fire."""
    evaluator = _evaluator(receiver, (0.1,) * 20)
    evaluator.evaluate()
    assert _firing(evaluator) == {"ttft": None, "itl": None}
    assert active_alerts(evaluator.statuses(), evaluator.recommendations.active()) == []
