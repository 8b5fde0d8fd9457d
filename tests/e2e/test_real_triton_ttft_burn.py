"""A TTFT SLO on real Triton: silent while first tokens are fast, a page at the webhook
once the decoupled model's first token slows past the threshold.

The burn windows need no shortening here: the daemon judges every window (5m … 3d) by
the events it has seen so far, so a short healthy phase followed by slow streams gives
error ratios that cross the page lines (6 × the 5 % budget over 6h and 30m, 30 %; then
14.4 × over 1h and 5m, 72 %) after a few dozen slow streams. A ticket (3 × over 1d and
2h, 15 %) comes first, as the ratio climbs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from alerting_support import WebhookReceiver
from real_triton import RealTriton
from support import DaemonProcess, wait_until

pytestmark = pytest.mark.real

THRESHOLD_SECONDS = 0.5
"""``slo.ttft.threshold``: far above the model's 20 ms first token even on a loaded host."""
SLOW_FIRST_TOKEN_MS = 600
"""``first_token_ms`` after the reload: every stream's first token misses the threshold."""
HEALTHY_STREAMS = 20
"""Good streams before the slow-down; few, so the slow ones soon pass 72 % of all."""


def _config(triton: RealTriton, webhook_url: str, path: Path) -> Path:
    """``llm_stream`` over HTTP with a 500 ms / 95 % TTFT SLO, alerts straight to the
    webhook. Evaluation every 2 s, not 1 s: the first evaluations judge every window by
    the few events seen so far."""
    path.write_text(
        f"""
targets:
  - name: llm
    url: {triton.http_url}
    metrics_url: {triton.metrics_url}
    models: [{{name: llm_stream}}]
canary: {{rate: 5/s, stream: {{max_tokens: 4, timeout: 10s}}}}
slo: {{ttft: {{threshold: 500ms, objective: 0.95}}}}
scrape: {{interval: 1s, timeout: 800ms}}
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


def _ttft_burn(text: str) -> dict[str, float]:
    """The canary TTFT burn rate of ``llm_stream`` by window, at the daemon."""
    samples = _samples(text, "tritonwatch_slo_burn_rate", model="llm_stream", slo="ttft")
    return {labels["window"]: value for labels, value in samples}


def _ttft_alerts(receiver: WebhookReceiver) -> list[dict[str, Any]]:
    return [a for a in receiver.alerts() if a["labels"].get("slo") == "ttft"]


def test_slow_first_tokens_burn_the_ttft_slo_and_page(
    real_triton: RealTriton, tmp_path: Path
) -> None:
    """Fails if fast streams raise a TTFT alert, or if first tokens slowed past the
    threshold on real Triton do not burn the TTFT SLO into a page at the webhook."""
    triton = real_triton
    receiver = WebhookReceiver()
    daemon = DaemonProcess(_config(triton, receiver.url, tmp_path / "tritonwatch.yaml"))
    try:

        def healthy() -> dict[str, float] | None:
            """The burn rates once enough fast streams were judged by an evaluation."""
            text = daemon.metrics()
            streams = _samples(text, "tritonwatch_canary_time_to_first_token_seconds_count",
                               model="llm_stream")  # fmt: skip
            burn = _ttft_burn(text)
            return burn if burn and sum(v for _, v in streams) >= HEALTHY_STREAMS else None

        before = wait_until(healthy, 60, f"{HEALTHY_STREAMS} streams and a TTFT burn rate", 0.5)
        assert set(before) >= {"5m", "1h"}, before
        assert max(before.values()) == 0.0, before  # no first token over 500 ms yet
        assert _ttft_alerts(receiver) == []

        config = triton.config("llm_stream")
        config["parameters"]["first_token_ms"] = {"string_value": str(SLOW_FIRST_TOKEN_MS)}
        triton.load("llm_stream", config)

        try:
            page = receiver.wait_for(
                "the TTFT page",
                lambda a: (
                    a["status"] == "firing"
                    and a["labels"].get("slo") == "ttft"
                    and a["labels"]["severity"] == "page"
                ),
                timeout=90,
            )
        except AssertionError as error:
            raise AssertionError(f"{error}; TTFT burn: {_ttft_burn(daemon.metrics())}") from None
        text = daemon.metrics()
    finally:
        try:
            assert daemon.stop() == 0, daemon.stderr_so_far()
        finally:
            receiver.close()
            triton.reset("llm_stream")  # the session's server: its first token fast again
    assert page["labels"] == {
        "alertname": "TritonSLOBurn",
        "severity": "page",
        "target": "llm",
        "model": "llm_stream",
        "slo": "ttft",
        "source": "canary",
    }
    assert page["annotations"]["summary"] == (
        "llm_stream on llm is burning its TTFT (time to first token) error budget (page)"
    )
    burn = _ttft_burn(text)
    # Every window holds the same few minutes of events, so all are over the lower page
    # line (6 × over 6h and 30m): a third or more of the streams were slow.
    assert set(burn) == {"5m", "30m", "1h", "2h", "6h", "1d", "3d"}, burn
    assert min(burn.values()) > 6.0, burn
    # The canary timed the slow first tokens themselves: with a third or more of the last
    # minute's streams slow, its p95 is at least the model's 600 ms sleep.
    [(_, p95)] = _samples(text, "tritonwatch_canary_stream_quantile_seconds",
                          model="llm_stream", measure="ttft", window="1m", quantile="0.95")  # fmt: skip
    assert p95 >= SLOW_FIRST_TOKEN_MS / 1000, p95
