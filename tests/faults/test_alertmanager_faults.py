"""Alertmanager down, then back: the daemon's alert path (the alert board and the
Alertmanager notifier with its delivery queue, as :class:`~tritonwatch.runtime.evaluator.Evaluator`
drives them) against a real ``prometheus-alertmanager`` delivering to a webhook.

Nothing that fired or resolved during the outage is lost; the outage shows in
``tritonwatch_alert_delivery_failures_total`` and ``tritonwatch_alerts_queue_length``
and in ``alert_delivery_failed`` log lines; the queue is bounded and a full queue says
how much it dropped (``tritonwatch_alerts_dropped_total``, ``alerts_dropped``).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import requests
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from structlog.testing import capture_logs

from alerting_support import Alertmanager, WebhookReceiver, fast_config
from support import assert_within_smoke_bound, free_port, sample_value, wait_until
from tritonwatch.export.alert_queue import QueueOptions
from tritonwatch.export.alertmanager import AlertmanagerNotifier
from tritonwatch.export.alerts import AlertBoard, AlertSpec
from tritonwatch.export.slo_metrics import AlertDeliveryCollector

pytestmark = pytest.mark.real

EVALUATION_S = 0.1
RESEND_S = 0.3
BACKOFF = QueueOptions(backoff_initial=0.05, backoff_max=0.25)


def _spec(model: str) -> AlertSpec:
    labels = {
        "alertname": "TritonTuningRecommendation",
        "severity": "ticket",
        "target": "sim",
        "model": model,
        "action": "lower_queue_delay",
    }
    annotations = {"summary": f"{model}: lower the queue delay"}
    return AlertSpec(MappingProxyType(labels), MappingProxyType(annotations))


class TapSession(requests.Session):
    """A real session that also keeps every alert Alertmanager accepted (HTTP 200)."""

    def __init__(self) -> None:
        super().__init__()
        self.accepted: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def post(self, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        response = super().post(url, *args, **kwargs)
        if response.status_code == 200:
            with self._lock:
                self.accepted.extend(kwargs.get("json") or [])
        return response

    def last_state(self) -> dict[str, dict[str, Any]]:
        """Each model's last accepted version (firing or resolved)."""
        with self._lock:
            return {alert["labels"]["model"]: alert for alert in self.accepted}

    def models(self) -> set[str]:
        return set(self.last_state())


class Daemonish:
    """The alert half of the daemon's evaluation job, run every ``EVALUATION_S``:
    the firing set → :meth:`AlertBoard.update` → the notifier, with its metrics."""

    def __init__(self, alertmanager_url: str, capacity: int = 10_000) -> None:
        self.board = AlertBoard(evaluation_interval=EVALUATION_S, resend_interval=RESEND_S)
        self.session = TapSession()
        options = QueueOptions(
            capacity=capacity,
            backoff_initial=BACKOFF.backoff_initial,
            backoff_max=BACKOFF.backoff_max,
        )
        self.notifier = AlertmanagerNotifier(
            alertmanager_url, timeout=1.0, session=self.session, queue=options
        )
        self.registry = CollectorRegistry()
        self.registry.register(AlertDeliveryCollector(lambda: [self.notifier.queue.stats()]))
        self.firing: set[str] = set()
        self.handed: list[tuple[float, str, bool]] = []
        """(monotonic time, model, resolved) of every alert handed to the notifier."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.notifier.start()

    def evaluate(self) -> None:
        due = self.board.update([_spec(model) for model in sorted(self.firing)])
        now = time.monotonic()
        self.handed += [(now, alert.labels["model"], alert.resolved) for alert in due]
        self.notifier.notify(due)

    def run(self) -> None:
        def loop() -> None:
            while not self._stop.wait(EVALUATION_S):
                self.evaluate()

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def metric(self, name: str) -> float | None:
        text = generate_latest(self.registry).decode()
        return sample_value(text, name, [("receiver", "alertmanager")])

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.notifier.stop()


def _active_in_alertmanager(alertmanager: Alertmanager) -> set[str]:
    """Models of the alerts Alertmanager holds as active now."""
    with urllib.request.urlopen(f"{alertmanager.url}/api/v2/alerts", timeout=5) as response:
        alerts = json.load(response)
    return {a["labels"]["model"] for a in alerts if a["status"]["state"] == "active"}


def _unix(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    server = WebhookReceiver()
    yield server
    server.close()


@pytest.fixture
def am_config(tmp_path: Path, receiver: WebhookReceiver) -> Path:
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(fast_config(receiver.url)))
    return path


def _webhook_status(receiver: WebhookReceiver, model: str, status: str) -> bool:
    return any(a["labels"]["model"] == model and a["status"] == status for a in receiver.alerts())


def test_down_for_several_resends_then_back_delivers_everything(
    tmp_path: Path, am_config: Path, receiver: WebhookReceiver
) -> None:
    """Before: a and b fire. During the outage: a resolves, c fires, d fires and
    resolves. After: Alertmanager has b and c active, a and d resolved, and the
    webhook heard of c firing and of a's resolution."""
    alertmanager = Alertmanager(am_config, tmp_path / "am", free_port())
    daemon = Daemonish(alertmanager.url)
    try:
        daemon.firing |= {"a", "b"}
        daemon.run()
        wait_until(lambda: daemon.session.models() == {"a", "b"}, 10, "a and b accepted")
        wait_until(lambda: _webhook_status(receiver, "a", "firing"), 10, "a at the webhook")

        with capture_logs() as logs:
            alertmanager.stop()
            down_at = time.monotonic()
            daemon.firing -= {"a"}
            daemon.firing |= {"c", "d"}
            wait_until(
                lambda: any(m == "d" and t > down_at for t, m, _ in daemon.handed), 5, "d fired"
            )
            daemon.firing -= {"d"}

            def several_resends() -> bool:
                resends = [t for t, m, _ in daemon.handed if m == "b" and t > down_at]
                return len(resends) >= 3

            wait_until(several_resends, 10, "three re-sends of b while Alertmanager is down")
            failures = daemon.metric("tritonwatch_alert_delivery_failures_total") or 0
            assert failures >= 3
            queued = daemon.metric("tritonwatch_alerts_queue_length")
            assert queued == 4  # a (resolved), b, c, d (resolved): one entry per alert
            alertmanager.start()
            up_at = time.monotonic()
            failed = daemon.metric("tritonwatch_alert_delivery_failures_total") or 0
            wait_until(
                lambda: daemon.metric("tritonwatch_alerts_queue_length") == 0,
                10,
                "the queue drained",
            )
        delivered_in = time.monotonic() - up_at
        # The first delivery after the return drained it: at most the attempt already
        # under way failed (the backoff's cap itself is exact in test_alerts_queue.py).
        assert (daemon.metric("tritonwatch_alert_delivery_failures_total") or 0) <= failed + 1
        assert_within_smoke_bound(
            delivered_in, BACKOFF.backoff_max + 0.5, "the queue draining once Alertmanager is back"
        )

        events = [log["event"] for log in logs]
        assert events.count("alert_delivery_failed") >= 3
        assert "alert_delivery_recovered" in events
        assert "alerts_dropped" not in events

        last = daemon.session.last_state()
        assert set(last) == {"a", "b", "c", "d"}  # everything reached Alertmanager
        now = time.time()
        for model in ("a", "d"):  # resolved during the outage: sent as resolved
            assert _unix(last[model]["endsAt"]) <= now
            assert any(m == model and resolved for _, m, resolved in daemon.handed)
        for model in ("b", "c"):  # still firing: valid for a while after the last send
            assert _unix(last[model]["endsAt"]) > _unix(last[model]["startsAt"])
        wait_until(
            lambda: _active_in_alertmanager(alertmanager) == {"b", "c"}, 10, "b and c active"
        )
        wait_until(lambda: _webhook_status(receiver, "c", "firing"), 10, "c at the webhook")
        wait_until(lambda: _webhook_status(receiver, "a", "resolved"), 10, "a resolved there")
        assert daemon.metric("tritonwatch_alerts_dropped_total") == 0
        assert (daemon.metric("tritonwatch_alerts_sent_total") or 0) >= 4
    finally:
        daemon.stop()
        alertmanager.stop()


def test_a_full_queue_is_bounded_and_counts_what_it_dropped(
    tmp_path: Path, am_config: Path
) -> None:
    """Capacity 5, Alertmanager not there yet, 8 alerts fire at once: the 3 oldest go,
    counted and logged; once Alertmanager is there the 5 queued arrive and the queue
    drains. (A queue smaller than the set of alerts firing together drops again at every
    re-send, as Prometheus' notifier does: the capacity must exceed that set.)"""
    port = free_port()
    daemon = Daemonish(f"http://127.0.0.1:{port}", capacity=5)
    alertmanager: Alertmanager | None = None
    models = [f"m{i}" for i in range(8)]
    try:
        daemon.firing |= set(models)
        with capture_logs() as logs:
            daemon.evaluate()
        dropped = [log for log in logs if log["event"] == "alerts_dropped"]
        assert len(dropped) == 1
        assert (dropped[0]["dropped"], dropped[0]["capacity"]) == (3, 5)
        assert dropped[0]["log_level"] == "error"
        assert daemon.metric("tritonwatch_alerts_dropped_total") == 3
        assert daemon.metric("tritonwatch_alerts_queue_length") == 5
        wait_until(
            lambda: (daemon.metric("tritonwatch_alert_delivery_failures_total") or 0) >= 1,
            5,
            "a failed delivery",
        )
        assert daemon.metric("tritonwatch_alerts_queue_length") == 5  # kept while down

        alertmanager = Alertmanager(am_config, tmp_path / "am", port)
        wait_until(lambda: daemon.metric("tritonwatch_alerts_queue_length") == 0, 10, "drained")
        assert daemon.session.models() == set(models[3:])  # the newest five
        assert daemon.metric("tritonwatch_alerts_sent_total") == 5
        assert daemon.metric("tritonwatch_alerts_dropped_total") == 3
        assert _active_in_alertmanager(alertmanager) == set(models[3:])
    finally:
        daemon.stop()
        if alertmanager is not None:
            alertmanager.stop()
