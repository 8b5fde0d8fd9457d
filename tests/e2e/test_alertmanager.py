"""Alerts through a real Alertmanager to a local webhook receiver, and the shipped config.

Alertmanager runs with the shipped ``deploy/alertmanager/alertmanager.yml`` (its routes
and inhibit rules), only the receiver URL and the group timers changed so that
notifications come in milliseconds instead of after 30 s.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml

from alerting_support import SHIPPED, Alertmanager, WebhookReceiver, fast_config
from support import free_port, wait_until
from tritonwatch.analysis.advisor import advise
from tritonwatch.analysis.advisor_records import AdvisorInput
from tritonwatch.analysis.serving import NotServing, ServerDown
from tritonwatch.export.alert_queue import QueueOptions
from tritonwatch.export.alertmanager import AlertmanagerNotifier
from tritonwatch.export.alerts import (
    AlertBoard,
    AlertSpec,
    active_alerts,
    not_serving_alert,
    server_down_alert,
)
from tritonwatch.export.webhook import WebhookNotifier
from tritonwatch.records.observations import Outcome, ReadinessObservation

pytestmark = pytest.mark.real

Payload = dict[str, Any]


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    server = WebhookReceiver()
    yield server
    server.close()


@pytest.fixture
def alertmanager(tmp_path: Path, receiver: WebhookReceiver) -> Iterator[Alertmanager]:
    config = tmp_path / "alertmanager.yml"
    config.write_text(yaml.safe_dump(fast_config(receiver.url)))
    manager = Alertmanager(config, tmp_path / "data", free_port())
    yield manager
    manager.stop()


@pytest.fixture
def notifier(alertmanager: Alertmanager) -> Iterator[AlertmanagerNotifier]:
    sender = AlertmanagerNotifier(
        alertmanager.url, timeout=2.0, queue=QueueOptions(backoff_initial=0.2, backoff_max=1.0)
    )
    sender.start()
    yield sender
    sender.stop()


QUEUE_DELAY_TOO_HIGH = AdvisorInput(
    target="prod-a",
    model="resnet50",
    latency_budget_seconds=0.050,
    p95_seconds=0.085,
    request_seconds=0.080,
    queue_seconds=0.072,
    dynamic_batching=True,
    max_batch_size=64,
    max_queue_delay_microseconds=80_000,
)


def _resnet(alert: Payload) -> bool:
    return bool(alert["labels"].get("model") == "resnet50")


def test_recommendation_arrives_and_its_resolution_too(
    notifier: AlertmanagerNotifier, receiver: WebhookReceiver
) -> None:
    """A recommendation reaches the webhook with its labels and values, then its resolution."""
    book = AlertBoard(evaluation_interval=1.0, resend_interval=60.0)
    recommendations = advise(QUEUE_DELAY_TOO_HIGH)
    notifier.notify(book.update(active_alerts([], recommendations)))
    firing = receiver.wait_for("the firing recommendation", lambda a: a["status"] == "firing")
    assert firing["labels"] == {
        "alertname": "TritonTuningRecommendation",
        "severity": "ticket",
        "target": "prod-a",
        "model": "resnet50",
        "action": "lower_queue_delay",
    }
    notes = firing["annotations"]
    assert (notes["current_value"], notes["proposed_value"]) == ("80000", "40000")
    assert notes["proposed_change"] == "max_queue_delay_microseconds: 80000 → 40000"
    assert "queue_share=0.9" in notes["description"]
    (spec,) = book.firing()
    assert firing["fingerprint"] == spec.fingerprint  # ours is Alertmanager's

    notifier.notify(book.update([]))
    resolved = receiver.wait_for("the resolution", lambda a: a["status"] == "resolved")
    assert resolved["labels"] == firing["labels"]


def test_an_alert_raised_while_alertmanager_is_down_arrives_when_it_is_back(
    alertmanager: Alertmanager, notifier: AlertmanagerNotifier, receiver: WebhookReceiver
) -> None:
    """An alert raised while Alertmanager is down is queued and delivered once it is back."""
    alertmanager.stop()
    book = AlertBoard(evaluation_interval=1.0)
    notifier.notify(book.update(active_alerts([], advise(QUEUE_DELAY_TOO_HIGH))))
    wait_until(lambda: notifier.queue.stats().failed_attempts >= 1, 10, "a failed delivery")
    assert notifier.queue.stats().queued == 1
    alertmanager.start()
    arrived = receiver.wait_for("the queued alert", _resnet)
    assert arrived["status"] == "firing"
    wait_until(lambda: notifier.queue.stats().queued == 0, 5, "the queue to empty")


def _burn(severity: str) -> AlertSpec:
    labels = {"alertname": "TritonSLOBurn", "severity": severity, "target": "prod-a"}
    labels |= {"model": "resnet50", "slo": "availability", "source": "canary"}
    return AlertSpec(MappingProxyType(labels), MappingProxyType({"summary": severity}))


def test_a_page_inhibits_the_ticket_for_the_same_slo(
    notifier: AlertmanagerNotifier, receiver: WebhookReceiver
) -> None:
    """The page goes first: Alertmanager's inhibitor learns of alerts asynchronously, so
    with the test's group_wait of 0 s a page and a ticket in one request could race
    (the shipped config waits 10-30 s before the first notification)."""
    book = AlertBoard(evaluation_interval=1.0)
    notifier.notify(book.update([_burn("page")]))
    receiver.wait_for("the page", lambda a: a["labels"]["severity"] == "page")
    notifier.notify(book.update([_burn("page"), _burn("ticket")]))
    wait_until(lambda: notifier.queue.stats().sent == 2, 5, "the ticket accepted")
    # A marker in the same group forces another notification of the group: the ticket
    # would be in it were it not inhibited.
    marker = {"alertname": "Marker", "target": "prod-a", "model": "resnet50"}
    notifier.notify(
        book.update([_burn("page"), _burn("ticket"), AlertSpec(marker, MappingProxyType({}))])
    )
    receiver.wait_for("the marker", lambda a: a["labels"]["alertname"] == "Marker")
    burns = [a["labels"]["severity"] for a in receiver.alerts() if "slo" in a["labels"]]
    assert set(burns) == {"page"}


def test_the_direct_webhook_notifier_speaks_version_4(receiver: WebhookReceiver) -> None:
    """Without Alertmanager: the same receiver gets the same payload shape."""
    webhook = WebhookNotifier(receiver.url, timeout=2.0)
    webhook.start()
    try:
        book = AlertBoard()
        webhook.notify(book.update(active_alerts([], advise(QUEUE_DELAY_TOO_HIGH))))
        receiver.wait_for("the webhook alert", _resnet)
    finally:
        webhook.stop()
    (payload,) = receiver.payloads
    assert (payload["version"], payload["status"]) == ("4", "firing")
    assert payload["groupLabels"] == {"target": "prod-a", "model": "resnet50"}


def test_amtool_accepts_the_shipped_config() -> None:
    """amtool accepts the shipped alertmanager.yml."""
    result = subprocess.run(
        ["amtool", "check-config", str(SHIPPED)], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def _down(target: str) -> AlertSpec:
    observation = ReadinessObservation(
        target, 0.0, Outcome.CONNECTION_ERROR, False, 0.01, "refused"
    )
    return server_down_alert(ServerDown(target, 0.0, observation), now=90.0)


def _not_serving(target: str) -> AlertSpec:
    return not_serving_alert(NotServing(target, "resnet50", 0.0, 75.0, 75, None))


def _with_target(spec: AlertSpec, target: str) -> AlertSpec:
    return AlertSpec(MappingProxyType({**spec.labels, "target": target}), spec.annotations)


def test_a_down_server_inhibits_its_models_burn_and_not_serving_alerts(
    notifier: AlertmanagerNotifier, receiver: WebhookReceiver
) -> None:
    """Breaks if the shipped inhibit rule lets a down server's models page beside it, or
    silences another server's models. The server alert goes first (the inhibitor learns
    of alerts asynchronously, see above)."""
    book = AlertBoard(evaluation_interval=1.0)
    down = _down("prod-a")
    notifier.notify(book.update([down]))
    arrived = receiver.wait_for(
        "the server alert", lambda a: a["labels"]["alertname"] == "TritonServerDown"
    )
    assert arrived["labels"] == {
        "alertname": "TritonServerDown",
        "severity": "page",
        "target": "prod-a",
    }
    others = [_burn("page"), _not_serving("prod-a"), _with_target(_burn("page"), "prod-b")]
    marker = AlertSpec(
        MappingProxyType({"alertname": "Marker", "target": "prod-a", "model": "resnet50"}),
        MappingProxyType({}),
    )
    notifier.notify(book.update([down, *others, marker]))
    receiver.wait_for("the marker", lambda a: a["labels"]["alertname"] == "Marker")
    receiver.wait_for("prod-b's burn", lambda a: a["labels"]["target"] == "prod-b")
    received = {(a["labels"]["alertname"], a["labels"]["target"]) for a in receiver.alerts()}
    assert received == {
        ("TritonServerDown", "prod-a"),
        ("Marker", "prod-a"),
        ("TritonSLOBurn", "prod-b"),
    }
