"""The whole path on a real tritonserver: canary and scrapes → daemon → Prometheus and
Alertmanager → webhook.

One stack for the module: the session's real Triton (its ``batching`` and ``slow_queue``),
the daemon watching it over HTTP and gRPC, a real Prometheus scraping the daemon, and a real
Alertmanager delivering to a local webhook receiver. ``batching`` is healthy and must stay
silent; ``slow_queue`` waits ~30 ms for batches against a 10 ms budget and must get its
``lower_queue_delay`` recommendation delivered.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerting_support import Alertmanager, Prometheus, WebhookReceiver, fast_config
from kinds import SECOND_REAL_TRITON
from real_triton import RealTriton
from support import DaemonProcess, free_port, wait_until

pytestmark = [pytest.mark.real, pytest.mark.xdist_group(SECOND_REAL_TRITON)]
"""On the second shared server's worker (tests/kinds.py): the longest real-Triton
modules run beside the first server's, not after them."""

CANARY_RATE = 20
"""Canary requests per second on ``batching``, per protocol."""
ENOUGH_REQUESTS = 600
"""About 30 s of canary per protocol: 99.9 % success then means no failure at all."""
COUNT_WAIT_S = 5 * ENOUGH_REQUESTS / CANARY_RATE
"""The wait for them: 5x the 30 s the open-loop canary takes to send them."""
SLOW_QUEUE_DELAY_US = 30000
"""``max_queue_delay_microseconds`` in tests/triton_models/slow_queue/config.pbtxt."""


@dataclass(frozen=True)
class Stack:
    """What the module's tests share: every process of the path, already running."""

    triton: RealTriton
    daemon: DaemonProcess
    prometheus: Prometheus
    alertmanager: Alertmanager
    receiver: WebhookReceiver


def _config(triton: RealTriton, path: Path, alertmanager_url: str) -> Path:
    """Two targets on the one server: HTTP canaries on one, a gRPC canary on the other.

    ``batching`` is healthy on any machine; what two shared, busy cores do to it must not
    read as a slow model. So its latency budget is 1 s (a loaded test machine showed p95
    200 ms and Triton's own request time 13 ms where 5 ms is usual), and the network
    rule's gap is 100 ms: on loopback the "network" gap is the canary's own client time,
    10-30 ms there. The SLO evaluation runs every 5 s, not 1 s: the first evaluation
    judges every burn window (up to 3d) by the events seen so far, and at 1 s one slow
    first request of ~12 was a ticket (1.7× over 3d and 6h).
    """
    path.write_text(
        f"""
targets:
  - name: triton-http
    url: {triton.http_url}
    metrics_url: {triton.metrics_url}
    models:
      - {{name: batching, slo: {{latency: {{threshold: 1s}}}}}}
      - name: slow_queue
        slo: {{latency: {{threshold: 10ms}}}}
        canary: {{rate: 10/s}}
  - name: triton-grpc
    url: {triton.http_url}
    grpc_url: {triton.grpc_url}
    metrics_url: {triton.metrics_url}
    models:
      - {{name: batching, slo: {{latency: {{threshold: 1s}}}}, canary: {{protocol: grpc}}}}
canary: {{rate: {CANARY_RATE}/s, distribution: poisson, timeout: 1500ms}}
scrape: {{interval: 1s, timeout: 800ms}}
exporter: {{detail: full}}  # the daemon's own burn rates, per window and source
alerting: {{alertmanager_url: "{alertmanager_url}", evaluation_interval: 5s, resend_interval: 2s}}
advisor: {{window: 6s, network_gap_min_seconds: 100ms}}
"""
    )
    return path


@pytest.fixture(scope="module")
def stack(real_triton: RealTriton, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Real Triton → daemon → Prometheus and Alertmanager → webhook, all on loopback.

    The daemon watches only ``batching`` and ``slow_queue`` and changes neither: the
    session's server serves them as their files say."""
    folder = tmp_path_factory.mktemp("real-triton-e2e")
    triton = real_triton
    with contextlib.ExitStack() as cleanup:
        receiver = WebhookReceiver()
        cleanup.callback(receiver.close)
        am_config = folder / "alertmanager.yml"
        am_config.write_text(yaml.safe_dump(fast_config(receiver.url)))
        alertmanager = Alertmanager(am_config, folder / "am-data", free_port())
        cleanup.callback(alertmanager.stop)
        # Prometheus starts first, on the daemon's address to be: its start-up CPU burst
        # (two shared cores) would otherwise stall the canary's first seconds, and the
        # advisor's 6 s window would read that stall as a slow model.
        listen = f"127.0.0.1:{free_port()}"
        prometheus = Prometheus(folder, listen)
        cleanup.callback(prometheus.stop)
        wait_until(prometheus.ready, timeout=20, what="Prometheus to listen", every=0.1)
        config = _config(triton, folder / "tritonwatch.yaml", alertmanager.url)
        daemon = DaemonProcess(config, "--listen", listen)
        cleanup.callback(lambda: _stop_cleanly(daemon))
        wait_until(lambda: prometheus.query('up{job="tritonwatch"} == 1'), timeout=20,
                   what="Prometheus' first successful scrape of the daemon", every=0.2)  # fmt: skip
        yield Stack(triton, daemon, prometheus, alertmanager, receiver)


def _stop_cleanly(daemon: DaemonProcess) -> None:
    assert daemon.stop() == 0, daemon.stderr_so_far()


# -- reading the daemon's exposition and Prometheus' answers ------------------------------
def _samples(text: str, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    """Every sample ``name`` in exposition ``text`` whose labels include ``labels``."""
    from prometheus_client.parser import text_string_to_metric_families

    return [
        (sample.labels, float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    ]


def _outcomes(text: str, protocol: str) -> dict[str, float]:
    """``batching``'s canary requests over ``protocol`` by outcome, at the daemon."""
    samples = _samples(text, "tritonwatch_canary_requests_total", model="batching",
                       protocol=protocol)  # fmt: skip
    return {labels["outcome"]: value for labels, value in samples}


def _by_label(result: list[dict[str, Any]], label: str) -> dict[str, float]:
    """A Prometheus instant-vector result as ``{series[label]: value}``."""
    return {series["metric"][label]: float(series["value"][1]) for series in result}


def _is(alert: dict[str, Any], **labels: str) -> bool:
    """True when the alert (webhook or Alertmanager form) carries all of ``labels``."""
    carried: dict[str, str] = alert["labels"]
    return labels.items() <= carried.items()


def _daemon_said(daemon: DaemonProcess, model: str) -> str:
    """The daemon's advisor and bottleneck log lines for ``model``, for failure messages."""
    said = [e for e in daemon.events if e.get("model") == model
            and e.get("event") in ("recommendation", "recommendation_cleared", "bottleneck_changed")]  # fmt: skip
    return "\n".join(str(e) for e in said[-10:]) or "(nothing)"


# -- scenario 1: a healthy model stays silent -------------------------------------------
def test_healthy_model_succeeds_over_http_and_grpc_and_raises_no_alert(stack: Stack) -> None:
    """Fails if either canary protocol fails requests on real Triton, if Prometheus sees
    other numbers than the daemon, or if a healthy model burns its SLO or gets alerted."""
    daemon, prometheus = stack.daemon, stack.prometheus

    def counted() -> dict[str, dict[str, float]] | None:
        seen = {p: _outcomes(daemon.metrics(), p) for p in ("http", "grpc")}
        return seen if all(sum(o.values()) >= ENOUGH_REQUESTS for o in seen.values()) else None

    try:
        outcomes = wait_until(
            counted, COUNT_WAIT_S, f"{ENOUGH_REQUESTS} canary requests per protocol", 1
        )
    except AssertionError as error:
        seen = {p: _outcomes(daemon.metrics(), p) for p in ("http", "grpc")}
        raise AssertionError(f"{error}; outcomes so far: {seen}") from None
    for protocol, by_outcome in outcomes.items():
        success = by_outcome.get("success", 0.0) / sum(by_outcome.values())
        assert success >= 0.999, f"{protocol}: {by_outcome}"

    # Prometheus scraped the same counters (a scrape or two behind the daemon).
    selector = 'tritonwatch_canary_requests_total{model="batching"}'

    def scraped_totals() -> dict[str, float] | None:
        totals = _by_label(prometheus.query(f"sum by (protocol) ({selector})"), "protocol")
        return totals if len(totals) == 2 and min(totals.values()) >= ENOUGH_REQUESTS else None

    totals = wait_until(scraped_totals, 10, "Prometheus to hold the canary counters", 0.5)
    good = _by_label(prometheus.query(
        f'sum by (protocol) (tritonwatch_canary_requests_total{{model="batching",outcome="success"}})'
        f" / sum by (protocol) ({selector})"), "protocol")  # fmt: skip
    assert set(good) == {"http", "grpc"}, (good, totals)
    assert min(good.values()) >= 0.999, good

    # Not burning: every availability window of both sources, at the daemon and in Prometheus.
    burn = _samples(daemon.metrics(), "tritonwatch_slo_burn_rate", model="batching",
                    slo="availability")  # fmt: skip
    assert {labels["target"] for labels, _ in burn} == {"triton-http", "triton-grpc"}, burn
    assert {labels["source"] for labels, _ in burn} >= {"canary"}, burn
    assert max(rate for _, rate in burn) < 0.01, burn
    scraped = prometheus.query('tritonwatch_slo_burn_rate{model="batching",slo="availability"}')
    assert scraped, "Prometheus holds no availability burn rate for batching"
    assert max(float(s["value"][1]) for s in scraped) < 0.01, scraped

    # The pipeline delivers (slow_queue's alerts got through it), yet nothing for batching.
    wait_until(lambda: any(_is(a, model="slow_queue") for a in stack.receiver.alerts()),
               timeout=30, what="any slow_queue alert at the webhook (the pipeline works)")  # fmt: skip
    assert not _samples(daemon.metrics(), "tritonwatch_recommendation", model="batching"), (
        _daemon_said(daemon, "batching")
    )
    assert stack.alertmanager.alerts(model="batching") == []
    alerted = [a for a in stack.receiver.alerts() if _is(a, model="batching")]
    assert alerted == [], "\n".join(
        [*(f"{a['status']} {a['labels']}: {a['annotations']['description']}" for a in alerted),
         _daemon_said(daemon, "batching")]
    )  # fmt: skip


# -- scenario 2: the delay model's recommendation is delivered ------------------------------
def test_slow_queue_gets_lower_queue_delay_through_alertmanager(stack: Stack) -> None:
    """Fails if the advisor misreads real Triton's queue time or config (no advice), or if
    the recommendation is lost between the daemon, Prometheus, Alertmanager and the webhook."""
    daemon, prometheus = stack.daemon, stack.prometheus
    wanted = {"target": "triton-http", "model": "slow_queue", "action": "lower_queue_delay"}

    try:
        wait_until(lambda: _samples(daemon.metrics(), "tritonwatch_recommendation", **wanted),
                   timeout=60, what="lower_queue_delay at the daemon", every=0.5)  # fmt: skip
    except AssertionError as error:
        raise AssertionError(
            f"{error}; the daemon said:\n{_daemon_said(daemon, 'slow_queue')}"
        ) from None
    [(labels, value)] = _samples(daemon.metrics(), "tritonwatch_recommendation", **wanted)
    assert value == 1
    assert (labels["parameter"], labels["severity"]) == ("max_queue_delay_microseconds", "ticket")

    advice = daemon.wait_for_event("recommendation", model="slow_queue", action="lower_queue_delay")
    assert (advice["current"], advice["proposed"]) == (
        SLOW_QUEUE_DELAY_US,
        SLOW_QUEUE_DELAY_US // 2,
    )
    assert advice["evidence"]["latency_budget_seconds"] == 0.01
    assert advice["evidence"]["p95_seconds"] > 0.01
    assert advice["evidence"]["queue_share"] >= 0.5  # the queue dominates real Triton's time

    matcher = ",".join(f'{k}="{v}"' for k, v in wanted.items())
    in_prometheus = wait_until(lambda: prometheus.query(f"tritonwatch_recommendation{{{matcher}}}"),
                               timeout=10, what="the recommendation in Prometheus", every=0.5)  # fmt: skip
    assert [float(s["value"][1]) for s in in_prometheus] == [1.0]

    firing = stack.receiver.wait_for(
        "TritonTuningRecommendation at the webhook",
        lambda a: _is(a, alertname="TritonTuningRecommendation", **wanted),
        timeout=30,
    )
    assert firing["status"] == "firing"
    assert firing["labels"]["severity"] == "ticket"
    annotations = firing["annotations"]
    assert annotations["proposed_change"] == "max_queue_delay_microseconds: 30000 → 15000"
    assert (annotations["current_value"], annotations["proposed_value"]) == ("30000", "15000")
    assert "over the 10.0 ms budget" in annotations["description"]
    held = stack.alertmanager.alerts(alertname="TritonTuningRecommendation", **wanted)
    assert [a["annotations"]["proposed_change"] for a in held] == [annotations["proposed_change"]]
    # The daemon only advises: the server's config is as it was.
    config = stack.triton.config("slow_queue")["dynamic_batching"]
    assert config["max_queue_delay_microseconds"] == SLOW_QUEUE_DELAY_US


# -- scenario 3: a generative model's streams ------------------------------------------------
STREAM_TOKENS = 4
"""Tokens each streamed canary request asks ``llm_stream`` for (its ``max_tokens`` input)."""
STREAM_REQUESTS = 30
"""Streams per protocol before the exported figures are read."""


def _stream_config(triton: RealTriton, path: Path) -> Path:
    """``llm_stream`` watched over HTTP and gRPC with the default ``stream.mode: auto``, so
    the daemon must find the decoupled policy in the model's config by itself."""
    path.write_text(
        f"""
targets:
  - name: llm-http
    url: {triton.http_url}
    metrics_url: {triton.metrics_url}
    models: [{{name: llm_stream}}]
  - name: llm-grpc
    url: {triton.http_url}
    grpc_url: {triton.grpc_url}
    metrics_url: {triton.metrics_url}
    models: [{{name: llm_stream, canary: {{protocol: grpc}}}}]
canary: {{rate: 5/s, stream: {{max_tokens: {STREAM_TOKENS}, timeout: 10s}}}}
scrape: {{interval: 1s, timeout: 800ms}}
"""
    )
    return path


def test_decoupled_model_gets_streaming_canaries_with_ttft_itl_and_tokens(
    real_triton: RealTriton, tmp_path: Path
) -> None:
    """Fails if the daemon does not detect a decoupled model and stream from it over HTTP
    and gRPC, or exports no TTFT/ITL quantiles, or counts other tokens than the model sent."""
    daemon = DaemonProcess(_stream_config(real_triton, tmp_path / "tritonwatch.yaml"))
    try:

        def settled() -> str | None:
            """A page where every request succeeded, enough of them, and the tokens
            counter caught up with the requests counter (both are written per stream)."""
            text = daemon.metrics()
            for protocol in ("http", "grpc"):
                requests = _samples(text, "tritonwatch_canary_requests_total", protocol=protocol,
                                    model="llm_stream")  # fmt: skip
                succeeded = sum(v for labels, v in requests if labels["outcome"] == "success")
                tokens = _samples(text, "tritonwatch_canary_output_tokens_total",
                                  protocol=protocol, model="llm_stream")  # fmt: skip
                if succeeded < STREAM_REQUESTS or succeeded != sum(v for _, v in requests):
                    return None
                if [v for _, v in tokens] != [succeeded * STREAM_TOKENS]:
                    return None
            return text

        try:
            text = wait_until(settled, 60, f"{STREAM_REQUESTS} clean streams per protocol", 0.5)
        except AssertionError as error:
            seen = [line for line in daemon.metrics().splitlines() if "llm_stream" in line and (
                "requests_total" in line or "output_tokens" in line)]  # fmt: skip
            raise AssertionError(f"{error}: {seen}") from None
        detected = [e for e in daemon.events if e.get("event") == "canary_stream_detected"]
        assert sorted(e["protocol"] for e in detected) == ["grpc", "http"], detected
        for protocol in ("http", "grpc"):
            for measure in ("ttft", "itl"):
                quantiles = _samples(text, "tritonwatch_canary_stream_quantile_seconds",
                                     protocol=protocol, measure=measure, window="5m")  # fmt: skip
                by_q = {labels["quantile"]: value for labels, value in quantiles}
                assert set(by_q) >= {"0.5", "0.95"}, (protocol, measure, quantiles)
                # The model's own pace (tests/triton_models/llm_stream): 20 ms to the
                # first token, 5 ms between tokens; the canary cannot see them faster.
                floor = 0.020 if measure == "ttft" else 0.005
                assert by_q["0.5"] >= floor * 0.9, (protocol, measure, by_q)
    finally:
        _stop_cleanly(daemon)
