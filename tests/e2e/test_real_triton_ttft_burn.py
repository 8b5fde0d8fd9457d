"""A streamed model's default SLOs on real Triton: with no ``slo`` section, a healthy
decoupled model raises no page though every stream outlasts the 50 ms latency default,
and a first token slowed past the 2 s TTFT default pages at the webhook.

``llm_stream`` sends the 16 tokens the canary asks for by default, the first after
20 ms, then one every 5 ms: about 95 ms a stream, twice the latency default that judged
streams before (and paged every zero-config LLM within minutes). Now its SLOs are
availability, TTFT (99 % within 2 s) and ITL (99 % within 200 ms).

Short on purpose: the canary streams 8 times a second and SLOs are evaluated every 2 s.
The burn windows need no shortening: the daemon judges every window (5m … 3d) by the
events it has seen so far, so once the slow first tokens pass 14.4 % of all (the page
line at 99 %, 14.4 × the 1 % budget) over at least 70 events (the ``alert_min_bad_events``
gate: 10 / (14.4 × 1 %)), the fast page fires. The slowed model runs 8 instances, so the
2.5 s first tokens come about 3 a second rather than one every 2.6 s. The 30 minutes a
healthy stream stays silent are on a fake clock, in
``tests/runtime/test_evaluator_stream_defaults.py``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from alerting_support import WebhookReceiver
from kinds import SECOND_REAL_TRITON
from real_triton import RealTriton
from support import DaemonProcess, wait_until

pytestmark = [pytest.mark.real, pytest.mark.xdist_group(SECOND_REAL_TRITON)]
"""On the second shared server's worker (tests/kinds.py): the longest real-Triton
modules run beside the first server's, not after them."""

SLOW_FIRST_TOKEN_MS = 2500
"""``first_token_ms`` after the reload: past the 2 s TTFT default, every stream."""
SLOW_INSTANCES = 8
HEALTHY_STREAMS = 70
"""Fast streams judged before the slow-down: the fast page's event gate (69.4) is met
by them alone, so the page waits only for the slow share to pass 14.4 %."""
MODEL = "llm_stream"


def _config(triton: RealTriton, webhook_url: str, path: Path) -> Path:
    """``llm_stream`` over HTTP and no ``slo`` section: the daemon's defaults judge it."""
    path.write_text(
        f"""
targets:
  - name: llm
    url: {triton.http_url}
    metrics_url: {triton.metrics_url}
    models: [{{name: {MODEL}}}]
canary: {{rate: 8/s}}
scrape: {{interval: 1s, timeout: 800ms}}
exporter: {{detail: full}}  # the daemon's own burn rates per window, histograms
alerting: {{webhook_url: "{webhook_url}", evaluation_interval: 2s, resend_interval: 2s}}
"""
    )
    return path


def _samples(text: str, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    """Every sample ``name`` in exposition ``text`` whose labels include ``labels``."""
    from prometheus_client.parser import text_string_to_metric_families

    return [
        (sample.labels, float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    ]


def _burn(text: str) -> dict[tuple[str, str], float]:
    """``llm_stream``'s canary burn rates at the daemon, by (SLO, window)."""
    samples = _samples(text, "tritonwatch_slo_burn_rate", model=MODEL, source="canary")
    return {(labels["slo"], labels["window"]): value for labels, value in samples}


def _pages(receiver: WebhookReceiver) -> list[dict[str, Any]]:
    return [a for a in receiver.alerts() if a["labels"].get("severity") == "page"]


def test_a_healthy_stream_does_not_page_and_a_slow_first_token_does(
    real_triton: RealTriton, tmp_path: Path
) -> None:
    """Fails if a zero-config daemon judges a healthy stream's whole length against the
    latency default (or pages it at all), if the TTFT and ITL defaults do not judge it,
    or if first tokens slowed past the TTFT default on real Triton do not page."""
    triton = real_triton
    receiver = WebhookReceiver()
    daemon = DaemonProcess(_config(triton, receiver.url, tmp_path / "tritonwatch.yaml"))
    original: dict[str, Any] | None = None
    try:

        def healthy() -> str | None:
            """The metrics once enough fast streams were judged by an evaluation."""
            text = daemon.metrics()
            streams = _samples(
                text, "tritonwatch_canary_time_to_first_token_seconds_count", model=MODEL
            )
            enough = sum(v for _, v in streams) >= HEALTHY_STREAMS
            return text if enough and ("ttft", "1h") in _burn(text) else None

        text = wait_until(healthy, 60, f"{HEALTHY_STREAMS} streams and a TTFT burn rate", 0.5)
        burn = _burn(text)
        assert {slo for slo, _ in burn} == {"availability", "ttft", "itl"}, burn  # no latency
        assert max(burn.values()) == 0.0, burn
        objectives = {
            labels["slo"]: value
            for labels, value in _samples(text, "tritonwatch_slo_objective_ratio", model=MODEL)
        }
        assert objectives == {"availability": 0.999, "ttft": 0.99, "itl": 0.99}
        # What the latency default would have judged: whole streams twice its 50 ms.
        [(_, p95)] = _samples(
            text,
            "tritonwatch_latency_quantile_seconds",
            model=MODEL,
            source="canary",
            window="1m",
            quantile="0.95",
        )
        assert p95 > 0.05, p95
        assert _pages(receiver) == []

        config = triton.config(MODEL)
        original = copy.deepcopy(config)
        config["parameters"]["first_token_ms"] = {"string_value": str(SLOW_FIRST_TOKEN_MS)}
        config["instance_group"] = [{"count": SLOW_INSTANCES, "kind": "KIND_CPU"}]
        triton.load(MODEL, config)

        try:
            page = receiver.wait_for(
                "the TTFT page",
                lambda a: a["status"] == "firing" and a["labels"]["severity"] == "page",
                timeout=90,
            )
        except AssertionError as error:
            raise AssertionError(f"{error}; burn: {_burn(daemon.metrics())}") from None
        text = daemon.metrics()
    finally:
        try:
            assert daemon.stop() == 0, daemon.stderr_so_far()
        finally:
            receiver.close()
            if original is not None:
                # The session's server: one fast instance again. Loaded over the slow one,
                # which Triton unloads in the background once its streams end (a reset
                # would wait here for the eight instances to drain and stop).
                triton.load(MODEL, original)
    assert page["labels"] == {
        "alertname": "TritonSLOBurn",
        "severity": "page",
        "target": "llm",
        "model": MODEL,
        "slo": "ttft",
        "source": "canary",
    }
    assert {a["labels"]["slo"] for a in _pages(receiver)} == {"ttft"}
    # The canary timed the slow first tokens themselves: past the 2 s default.
    [(_, p95)] = _samples(
        text,
        "tritonwatch_canary_stream_quantile_seconds",
        model=MODEL,
        measure="ttft",
        window="1m",
        quantile="0.95",
    )
    assert p95 >= SLOW_FIRST_TOKEN_MS / 1000, p95
