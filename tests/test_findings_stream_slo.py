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
from tritonwatch.runtime.findings import Findings
from tritonwatch.scrape.triton_scrapers import TritonScrapers
from tritonwatch.state.canary_series import CanaryStats, latency_buckets
from tritonwatch.state.stream_series import ITL_DEFAULT_BUCKETS, TTFT_DEFAULT_BUCKETS, StreamStats

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


def _findings(receiver: WebhookReceiver, first_tokens: tuple[float, ...]) -> Findings:
    """Findings over a StreamStats that timed one stream per first token, 20 ms gaps."""
    config = parse_config(CONFIG.format(url=receiver.url), "stream.yaml")
    streams = StreamStats(
        latency_buckets([0.4], TTFT_DEFAULT_BUCKETS), latency_buckets([0.05], ITL_DEFAULT_BUCKETS)
    )
    streams.declare([("llm", "gen", "http")])
    for index, ttft in enumerate(first_tokens):
        gaps = (0.02, 0.02, 0.02)
        at = float(index)
        streams.record(
            StreamResult("llm", "gen", "http", at, Outcome.SUCCESS, ttft, gaps, 4, 1.0, None)
        )
    return Findings(
        config,
        canary_stats=CanaryStats(),
        triton=TritonScrapers(),
        registry=CollectorRegistry(),
        stream_stats=streams,
        clock=lambda: 100.0,
        wall_clock=lambda: WALL,
    )


def _firing(findings: Findings) -> dict[str, str | None]:
    """Each SLO with events and the severity of its firing burn condition, if any."""
    return {
        str(s.spec.kind): None if s.firing is None else str(s.firing.severity)
        for s in findings.statuses()
    }


def test_slow_first_tokens_send_a_ttft_page_with_the_rules_labels(
    receiver: WebhookReceiver,
) -> None:
    """Breaks if evaluate() does not feed the stream histograms to the SLOs, or the TTFT
    burn alert lacks the labels of the generated rule or says a bare "ttft"."""
    findings = _findings(receiver, (0.6,) * 18 + (0.1,) * 2)  # 90 % slow: 18× the budget
    findings.start("http://127.0.0.1:9100/")
    try:
        findings.evaluate()
        assert _firing(findings) == {"ttft": "page", "itl": None}
        alert = receiver.wait_for("the TTFT burn alert", lambda a: True)
    finally:
        findings.stop()
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
    findings = _findings(receiver, (0.1,) * 20)
    findings.evaluate()
    assert _firing(findings) == {"ttft": None, "itl": None}
    assert active_alerts(findings.statuses(), findings.recommendations.active()) == []
