"""The whole path: simulator scenario → daemon's advisor → real Alertmanager → webhook.

Also the experiment path: a config change seen by the daemon's config poller gets a
verdict from the canary before and after, exported and announced.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tritonclient.http as httpclient
import yaml

from alerting_support import Alertmanager, WebhookReceiver, fast_config
from support import QUIET_HOST_CPU, DaemonProcess, free_port, sample_value, wait_until
from tritonwatch.sim.server import Simulator

pytestmark = pytest.mark.real


def _config(sim: Simulator, path: Path, alertmanager_url: str, **extra: str) -> Path:
    path.write_text(
        f"""
targets:
  - name: sim
    url: {sim.http_url}
    metrics_url: {sim.metrics_url}
    models: [{{name: resnet50}}]
canary: {{rate: 20/s, distribution: poisson, timeout: 1500ms}}
scrape: {{interval: 1s, timeout: 800ms}}
alerting: {{alertmanager_url: "{alertmanager_url}", evaluation_interval: 1s, resend_interval: 2s,
            not_serving_for: {extra.get("not_serving_for", "1m")}}}
advisor: {{window: 6s, experiment_window: {extra.get("experiment_window", "5m")}}}
"""
    )
    return path


def _lower_delay(alert: dict[str, object]) -> bool:
    labels = alert["labels"]
    assert isinstance(labels, dict)
    return bool(labels.get("model") == "resnet50" and labels.get("action") == "lower_queue_delay")


def test_recommendation_reaches_the_webhook_resolves_and_survives_an_outage(tmp_path: Path) -> None:
    """The daemon's advice reaches the webhook, resolves with its cause, and outlives an outage."""
    receiver = WebhookReceiver()
    am_config = tmp_path / "alertmanager.yml"
    am_config.write_text(yaml.safe_dump(fast_config(receiver.url)))
    alertmanager = Alertmanager(am_config, tmp_path / "am-data", free_port())
    try:
        with Simulator(scenario="queue-delay-too-high", host_cpu_utilization=QUIET_HOST_CPU) as sim:
            daemon = DaemonProcess(_config(sim, tmp_path / "c.yaml", alertmanager.url))
            try:
                firing = receiver.wait_for(
                    "the lower_queue_delay recommendation", _lower_delay, timeout=40
                )
                assert firing["status"] == "firing"
                assert firing["labels"]["alertname"] == "TritonTuningRecommendation"
                assert (
                    firing["annotations"]["proposed_change"]
                    == "max_queue_delay_microseconds: 80000 → 40000"
                )
                assert "p95" in firing["annotations"]["description"]

                sim.set_scenario("healthy", "resnet50")  # the cause goes away
                resolved = receiver.wait_for(
                    "the recommendation resolved",
                    lambda a: _lower_delay(a) and a["status"] == "resolved",
                    timeout=40,
                )
                assert resolved["endsAt"] >= firing["startsAt"]

                alertmanager.stop()  # the receiver's side goes down...
                seen = len(receiver.alerts())
                sim.set_scenario("queue-delay-too-high", "resnet50")  # ...while it fires again
                wait_until(
                    lambda: "lower_queue_delay" in daemon.metrics(), 40, "the recommendation again"
                )
                alertmanager.start()
                again = wait_until(
                    lambda: next((a for a in receiver.alerts()[seen:] if _lower_delay(a) and a["status"] == "firing"), None),
                    40, "the alert raised during the outage",
                )  # fmt: skip
                assert again["annotations"]["proposed_change"].startswith(
                    "max_queue_delay_microseconds"
                )
            finally:
                assert daemon.stop() == 0
    finally:
        alertmanager.stop()
        receiver.close()


def test_a_config_change_gets_an_experiment_verdict(tmp_path: Path) -> None:
    """The delay goes 80 ms → 5 ms under the same canary: p95 falls, verdict keep."""
    with Simulator(scenario="queue-delay-too-high", host_cpu_utilization=QUIET_HOST_CPU) as sim:
        config = _config(sim, tmp_path / "c.yaml", "http://127.0.0.1:9", experiment_window="5s")
        text = config.read_text().replace('alertmanager_url: "http://127.0.0.1:9", ', "")
        config.write_text(text)
        daemon = DaemonProcess(config)
        try:
            daemon.wait_for_event("canary_started")
            wait_until(lambda: (sample_value(daemon.metrics(), "tritonwatch_canary_requests_total",
                                              [("outcome", "success")]) or 0) >= 100, 20, "5 s of canary")  # fmt: skip
            client = httpclient.InferenceServerClient(sim.http_url.removeprefix("http://"))
            current = client.get_model_config("resnet50")
            current["dynamic_batching"]["max_queue_delay_microseconds"] = 5000
            client.load_model("resnet50", config=json.dumps(current))
            client.close()
            opened = daemon.wait_for_event("experiment_opened", timeout=20)
            verdict = daemon.wait_for_event("experiment_verdict", timeout=30)
            text = daemon.metrics()
        finally:
            assert daemon.stop() == 0
    assert opened["parameters"] == ["dynamic_batching.max_queue_delay_microseconds"]
    assert verdict["verdict"] == "keep"
    assert "p95 improved" in verdict["reason"]
    labels = [
        ("model", "resnet50"),
        ("parameter", "dynamic_batching.max_queue_delay_microseconds"),
        ("verdict", "keep"),
    ]
    assert sample_value(text, "tritonwatch_experiment_verdict", labels) == 1


def test_a_ready_model_failing_every_request_is_not_serving_at_alertmanager(
    tmp_path: Path,
) -> None:
    """Breaks if a model whose every request fails on a server that reads ready does not
    reach a real Alertmanager as TritonModelNotServing (page, with the last error and
    the failed count), or if TritonServerDown fires. The daemon holds the verdict
    ``alerting.not_serving_for``, 5 s here (a minute by default; that the hold is the
    configured one is tests/runtime/test_evaluator_not_serving_for.py's). (The
    availability burn is not waited for: after 5 failures the canary's circuit breaker
    sends one probe in 10 s, so a young window takes long to hold the burn's 695
    events.)"""
    receiver = WebhookReceiver()
    am_config = tmp_path / "alertmanager.yml"
    am_config.write_text(yaml.safe_dump(fast_config(receiver.url)))
    alertmanager = Alertmanager(am_config, tmp_path / "am-data", free_port())
    try:
        with Simulator(scenario="healthy") as sim:
            config = _config(sim, tmp_path / "c.yaml", alertmanager.url, not_serving_for="5s")
            daemon = DaemonProcess(config)
            try:
                wait_until(
                    lambda: sample_value(
                        daemon.metrics(),
                        "tritonwatch_canary_requests_total",
                        [("outcome", "success")],
                    ),
                    40,
                    "the first successful canary requests",
                )
                sim.inject_fault(kind="error_burst", reason="BACKEND", fraction=1.0)
                # 5 s of failures, then the next evaluation (1 s): 10× that at most.
                alert = receiver.wait_for(
                    "TritonModelNotServing",
                    lambda a: a["labels"]["alertname"] == "TritonModelNotServing",
                    timeout=60,
                )
            finally:
                assert daemon.stop() == 0
    finally:
        alertmanager.stop()
        receiver.close()
    assert alert["labels"] == {
        "alertname": "TritonModelNotServing",
        "severity": "page",
        "target": "sim",
        "model": "resnet50",
    }
    notes = alert["annotations"]
    assert notes["last_error"].startswith("http_error: ")
    assert int(notes["failed_requests"]) >= 5  # the breaker's 5, then its probes
    assert notes["runbook_url"] == "docs/runbook.md#tritonmodelnotserving"
    names = {a["labels"]["alertname"] for a in receiver.alerts()}
    assert "TritonServerDown" not in names
