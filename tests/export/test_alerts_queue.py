"""Alert delivery: the bounded queue, backoff on a fake clock, Alertmanager's API, the webhook."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pytest
import requests
from structlog.testing import capture_logs

from support import wait_until
from tritonwatch.export.alert_queue import (
    DeliveryError,
    DeliveryQueue,
    QueueOptions,
    RejectedError,
)
from tritonwatch.export.alertmanager import AlertmanagerNotifier
from tritonwatch.export.alerts import Alert
from tritonwatch.export.interfaces import Notifier
from tritonwatch.export.webhook import WebhookNotifier

T0 = 1_700_000_000.0


def _alert(name: str = "a", *, resolved: bool = False, model: str = "m") -> Alert:
    return Alert(
        MappingProxyType({"alertname": name, "target": "t", "model": model}),
        MappingProxyType({"summary": name}),
        T0,
        T0 + (0 if resolved else 240),
        resolved,
    )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Sink:
    """A send function that fails while ``failing`` holds an error."""

    batches: list[list[str]] = field(default_factory=list)
    failing: Exception | None = None

    def __call__(self, alerts: Sequence[Alert]) -> None:
        if self.failing is not None:
            raise self.failing
        self.batches.append([a.labels["alertname"] for a in alerts])


def _queue(sink: Sink, clock: Clock, **options: Any) -> DeliveryQueue:
    return DeliveryQueue("test", sink, QueueOptions(clock=clock, jitter=lambda: 0.0, **options))


def test_sends_in_batches_oldest_first() -> None:
    """Queued alerts go out oldest first in batches of batch_size, and the queue empties."""
    sink, clock = Sink(), Clock()
    queue = _queue(sink, clock, batch_size=2)
    queue.put([_alert("a"), _alert("b"), _alert("c")])
    assert queue.deliver_once() and queue.deliver_once()
    assert not queue.deliver_once()
    assert sink.batches == [["a", "b"], ["c"]]
    assert (queue.stats().sent, queue.stats().queued) == (3, 0)


def test_a_newer_version_replaces_the_queued_one_in_place() -> None:
    """A newer version of a queued alert replaces it in its place, not as a second entry."""
    sink, clock = Sink(), Clock()
    queue = _queue(sink, clock)
    queue.put([_alert("a"), _alert("b")])
    queue.put([_alert("a", resolved=True)])
    assert queue.stats().queued == 2
    queue.deliver_once()
    assert sink.batches == [["a", "b"]]


def test_full_queue_drops_the_oldest_and_counts_it() -> None:
    """A full queue drops its oldest alerts, keeps the newest, and counts what it dropped."""
    sink, clock = Sink(), Clock()
    queue = _queue(sink, clock, capacity=3)
    queue.put([_alert(name) for name in "abcde"])
    queue.deliver_once()
    assert sink.batches == [["c", "d", "e"]]
    assert queue.stats().dropped == 2


def test_backoff_doubles_to_its_ceiling_and_nothing_is_lost() -> None:
    """Jitter 0 waits half the ceiling: 0.5, 1, 2, 2 s (ceiling 4 s, initial 1 s)."""
    sink, clock = Sink(failing=DeliveryError("HTTP 503")), Clock()
    queue = _queue(sink, clock, backoff_initial=1.0, backoff_max=4.0)
    queue.put([_alert("a")])
    waits = []
    with capture_logs() as logs:
        for _ in range(4):
            assert not queue.deliver_once()
            waits.append(queue.seconds_until_retry())
            assert not queue.deliver_once()  # still backing off: not even tried
            clock.now += waits[-1]
        queue.put([_alert("b")])  # raised while Alertmanager is away
        sink.failing = None
        assert queue.deliver_once()
    assert waits == [0.5, 1.0, 2.0, 2.0]
    assert sink.batches == [["a", "b"]]
    assert queue.stats().failed_attempts == 4
    assert [e["event"] for e in logs] == ["alert_delivery_failed"] * 4 + [
        "alert_delivery_recovered"
    ]
    assert queue.seconds_until_retry() == 0.0


def test_jitter_spreads_retries_up_to_the_ceiling() -> None:
    """Jitter near 1 waits nearly the whole backoff step (0.9995 s of 1 s), never beyond."""
    sink, clock = Sink(failing=DeliveryError("down")), Clock()
    queue = DeliveryQueue("t", sink, QueueOptions(clock=clock, jitter=lambda: 0.999))
    queue.put([_alert()])
    queue.deliver_once()
    assert queue.seconds_until_retry() == pytest.approx(0.9995)


def test_rejected_alerts_are_dropped_without_backoff() -> None:
    """Alerts the receiver rejects (HTTP 400) are dropped and logged, with no backoff."""
    sink, clock = Sink(failing=RejectedError("HTTP 400: bad alert")), Clock()
    queue = _queue(sink, clock)
    queue.put([_alert()])
    with capture_logs() as logs:
        assert not queue.deliver_once()
    assert (queue.stats().rejected, queue.stats().queued) == (1, 0)
    assert queue.seconds_until_retry() == 0.0
    assert logs[0]["event"] == "alerts_rejected"


def test_an_unexpected_error_backs_off_instead_of_ending_delivery() -> None:
    """An unexpected error while sending is logged and backed off; delivery resumes after."""
    sink, clock = Sink(failing=TypeError("not JSON serializable")), Clock()
    queue = _queue(sink, clock)
    queue.put([_alert()])
    with capture_logs() as logs:
        assert not queue.deliver_once()
    assert [e["event"] for e in logs] == ["alert_delivery_crashed", "alert_delivery_failed"]
    assert logs[1]["error"] == "TypeError"
    sink.failing = None
    clock.now += queue.seconds_until_retry()
    assert queue.deliver_once()


def test_an_update_during_a_send_is_kept_for_the_next_one() -> None:
    """An alert updated while its batch is in flight is sent again, not lost as delivered."""
    clock = Clock()
    sent: list[bool] = []

    def send(alerts: Sequence[Alert]) -> None:
        sent.extend(a.resolved for a in alerts)
        if len(sent) == 1:
            queue.put([_alert(resolved=True)])

    queue = DeliveryQueue("t", send, QueueOptions(clock=clock))
    queue.put([_alert()])
    queue.deliver_once()
    queue.deliver_once()
    assert sent == [False, True]


def test_the_sending_thread_delivers_and_stops() -> None:
    """The queue's own thread delivers what is put and stops when asked."""
    sink = Sink()
    queue = DeliveryQueue("t", sink)
    queue.start()
    try:
        queue.put([_alert("a")])
        wait_until(lambda: sink.batches, timeout=5, what="a delivery")
    finally:
        queue.stop(timeout=2)
    assert sink.batches == [["a"]]


@dataclass
class FakeResponse:
    status_code: int
    text: str = ""


class FakeSession:
    """Stands in for ``requests.Session``: records posts, answers from a script."""

    def __init__(self, *answers: int | Exception) -> None:
        self.answers = list(answers)
        self.posts: list[dict[str, Any]] = []
        self.closed = False
        self._lock = threading.Lock()

    def post(self, url: str, **kwargs: Any) -> FakeResponse:
        with self._lock:
            self.posts.append({"url": url, **kwargs})
            answer = self.answers.pop(0) if self.answers else 200
        if isinstance(answer, Exception):
            raise answer
        return FakeResponse(answer, "oops")

    def close(self) -> None:
        self.closed = True


def _alertmanager(session: FakeSession, **options: Any) -> AlertmanagerNotifier:
    return AlertmanagerNotifier(
        "http://am:9093/",
        session=session,  # type: ignore[arg-type]
        queue=QueueOptions(clock=Clock(), jitter=lambda: 0.0),
        **options,
    )


def test_alertmanager_gets_api_v2_alerts_with_a_bearer_token() -> None:
    """Alertmanager gets POST /api/v2/alerts with the bearer token and timeout; stop closes."""
    session = FakeSession()
    notifier = _alertmanager(session, bearer_token="s3cret", timeout=3.0)
    notifier.notify([_alert()])
    notifier.queue.deliver_once()
    (post,) = session.posts
    assert post["url"] == "http://am:9093/api/v2/alerts"
    assert post["json"] == [_alert().to_api()]
    assert post["headers"] == {"Authorization": "Bearer s3cret"}
    assert (post["auth"], post["timeout"]) == (None, 3.0)
    notifier.stop()
    assert session.closed


def test_alertmanager_basic_auth() -> None:
    """Basic auth reaches Alertmanager as auth, with no Authorization header of our own."""
    session = FakeSession()
    notifier = _alertmanager(session, basic_auth=("user", "pw"))
    notifier.notify([_alert()])
    notifier.queue.deliver_once()
    assert (session.posts[0]["auth"], session.posts[0]["headers"]) == (("user", "pw"), None)


@pytest.mark.parametrize(
    ("answer", "retried"),
    [
        (503, True),
        (429, True),
        (requests.ConnectionError("http://am:9093/api/v2/alerts refused"), True),
        (requests.Timeout(), True),
        (400, False),
    ],
)
def test_status_decides_between_retry_and_drop(answer: int | Exception, retried: bool) -> None:
    """503, 429, refusals and timeouts are retried, 400 dropped, and no log quotes the URL."""
    session = FakeSession(answer)
    notifier = _alertmanager(session)
    notifier.notify([_alert()])
    with capture_logs() as logs:
        notifier.queue.deliver_once()
    stats = notifier.queue.stats()
    assert (stats.queued, stats.failed_attempts) == ((1, 1) if retried else (0, 0))
    assert "am:9093" not in str(logs)  # failures are described without the URL


def _webhook(session: FakeSession, clock: Clock) -> WebhookNotifier:
    return WebhookNotifier(
        "https://hooks.example/T000/SECRET",
        session=session,  # type: ignore[arg-type]
        queue=QueueOptions(clock=clock, jitter=lambda: 0.0),
        clock=clock,
        external_url="http://daemon:9849",
    )


def test_webhook_posts_alertmanager_v4_payloads_grouped_by_model() -> None:
    """The webhook gets Alertmanager's version 4 payload, one per target and model."""
    session = FakeSession()
    notifier = _webhook(session, Clock())
    notifier.notify([_alert("a"), _alert("b"), _alert("c", model="other")])
    notifier.queue.deliver_once()
    first, second = (post["json"] for post in session.posts)
    assert first["version"] == "4"
    assert first["status"] == "firing"
    assert first["groupLabels"] == {"target": "t", "model": "m"}
    assert first["groupKey"] == '{}:{target="t", model="m"}'
    assert first["commonLabels"] == {"target": "t", "model": "m"}
    assert first["externalURL"] == "http://daemon:9849"
    assert [a["labels"]["alertname"] for a in first["alerts"]] == ["a", "b"]
    alert = first["alerts"][0]
    assert alert["status"] == "firing"
    assert alert["endsAt"] == "0001-01-01T00:00:00Z"
    assert alert["fingerprint"] == _alert("a").fingerprint
    assert set(alert) == {
        "status",
        "labels",
        "annotations",
        "startsAt",
        "endsAt",
        "generatorURL",
        "fingerprint",
    }
    assert second["groupLabels"]["model"] == "other"


def test_webhook_notifies_changes_and_repeats_only_after_four_hours() -> None:
    """The webhook hears of changes at once and repeats firing alerts only after four hours."""
    session, clock = FakeSession(), Clock()
    notifier = _webhook(session, clock)

    def notified(*alerts: Alert) -> list[str]:
        before = len(session.posts)
        notifier.notify(alerts)
        while notifier.queue.deliver_once():
            pass
        return [p["json"]["status"] for p in session.posts[before:]]

    assert notified(_alert(resolved=True)) == []  # never fired here
    assert notified(_alert()) == ["firing"]
    clock.now += 60
    assert notified(_alert()) == []  # the alert book's re-send
    clock.now += 4 * 3600
    assert notified(_alert()) == ["firing"]
    assert notified(_alert(resolved=True)) == ["resolved"]
    assert notified(_alert(resolved=True)) == []


def test_webhook_failure_never_logs_the_url() -> None:
    """A failed webhook delivery logs the error's type, never the URL with its secret path."""
    session = FakeSession(requests.ConnectionError("https://hooks.example/T000/SECRET"))
    notifier = _webhook(session, Clock())
    notifier.notify([_alert()])
    with capture_logs() as logs:
        notifier.queue.deliver_once()
    assert logs[0]["error"] == "ConnectionError"
    assert "SECRET" not in str(logs)


def test_notifiers_build_with_defaults_and_stop_unstarted() -> None:
    """Both notifiers build from a URL alone, name their receiver, and stop before starting."""
    notifiers: list[Notifier] = [
        AlertmanagerNotifier("http://am:9093"),
        WebhookNotifier("http://hook"),
    ]
    assert [n.queue.receiver for n in notifiers] == ["alertmanager", "webhook"]
    for notifier in notifiers:
        notifier.stop()
