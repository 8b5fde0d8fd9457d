"""Delivering alerts: a bounded queue with exponential backoff, for every receiver.

:class:`DeliveryQueue` holds the latest version of each alert (by fingerprint) until
a receiver took it. A newer version of a queued alert replaces it in place — a resolve
overtakes its own firing, and an outage of Alertmanager costs memory per *alert*, not
per re-send — so that when the receiver comes back it gets each alert's current state
and nothing is lost. The queue is bounded (10 000 alerts, as Prometheus' notifier);
when full, the oldest entry goes and ``tritonwatch_alerts_dropped_total`` counts it.

Failures back off exponentially (1 s doubling to 60 s, with jitter so a fleet of
daemons does not retry in step) and the same batch is tried again. One thread per
receiver sends; it waits on a condition that new alerts, the end of a backoff or
:meth:`DeliveryQueue.stop` wake, never polls.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import requests

from tritonwatch.common.logs import get_logger
from tritonwatch.export.alerts import Alert

_log = get_logger("alerts")
DEFAULT_CAPACITY = 10_000
DEFAULT_BATCH_SIZE = 64
"""Alerts per request, as Prometheus' notifier sends them."""


class DeliveryError(Exception):
    """A send failed in a way that may pass (connection refused, 5xx): retry later."""


class RejectedError(Exception):
    """The receiver refused the alerts as invalid (4xx): retrying cannot help."""


@dataclass(frozen=True, slots=True)
class QueueOptions:
    """How a :class:`DeliveryQueue` holds and retries.

    ``clock`` is monotonic seconds (backoff deadlines) and ``jitter`` a random number in
    [0, 1); both are injectable so tests drive time themselves.
    """

    capacity: int = DEFAULT_CAPACITY
    batch_size: int = DEFAULT_BATCH_SIZE
    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    clock: Callable[[], float] = time.monotonic
    jitter: Callable[[], float] = random.random


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counters of one receiver's queue, for the exporter."""

    receiver: str
    queued: int
    sent: int
    dropped: int
    rejected: int
    failed_attempts: int


class DeliveryQueue:
    """Latest state of each undelivered alert, sent in batches by :meth:`deliver_once`.

    Args:
        receiver: the name in logs and metrics (``alertmanager``, ``webhook``).
        send: delivers a batch; raises :class:`DeliveryError` or :class:`RejectedError`.
        options: capacity, batch size, backoff, clock.
    """

    def __init__(
        self,
        receiver: str,
        send: Callable[[Sequence[Alert]], None],
        options: QueueOptions | None = None,
    ) -> None:
        self.receiver = receiver
        self._send = send
        self._options = options or QueueOptions()
        self._clock = self._options.clock
        self._pending: OrderedDict[str, Alert] = OrderedDict()
        self._wake = threading.Condition()
        self._retry_at = 0.0
        self._failures_in_row = 0
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._sent = self._dropped = self._rejected = self._failed_attempts = 0

    def put(self, alerts: Iterable[Alert]) -> None:
        """Queues ``alerts``, each replacing a queued older version of itself."""
        dropped = 0
        with self._wake:
            for alert in alerts:
                key = alert.fingerprint
                if key not in self._pending and len(self._pending) >= self._options.capacity:
                    self._pending.popitem(last=False)
                    dropped += 1
                self._pending[key] = alert
            self._dropped += dropped
            total = self._dropped
            self._wake.notify()
        if dropped:
            _log.error(
                "alerts_dropped",
                receiver=self.receiver,
                dropped=dropped,
                dropped_total=total,
                capacity=self._options.capacity,
            )

    def seconds_until_retry(self) -> float:
        """0 when a send may be tried now."""
        with self._wake:
            return max(0.0, self._retry_at - self._clock())

    def deliver_once(self) -> bool:
        """Sends the oldest batch unless backing off; True when a batch was delivered."""
        with self._wake:
            if not self._pending or self._clock() < self._retry_at:
                return False
            batch = list(itertools.islice(self._pending.items(), self._options.batch_size))
        alerts = [alert for _, alert in batch]
        try:
            self._send(alerts)
        except RejectedError as error:
            _log.error(
                "alerts_rejected", receiver=self.receiver, alerts=len(alerts), error=str(error)
            )
            self._forget(batch, rejected=True)
            return False
        except DeliveryError as error:
            self._back_off(str(error))
            return False
        except Exception as error:  # a bug must not end delivery for good: retry later
            _log.exception("alert_delivery_crashed", receiver=self.receiver)
            self._back_off(type(error).__name__)
            return False
        self._forget(batch, rejected=False)
        return True

    def _forget(self, batch: list[tuple[str, Alert]], *, rejected: bool) -> None:
        """Removes what was handled, unless a newer version arrived meanwhile."""
        with self._wake:
            for key, alert in batch:
                if self._pending.get(key) is alert:
                    del self._pending[key]
            if rejected:
                self._rejected += len(batch)
                return
            self._sent += len(batch)
            recovered, self._failures_in_row = self._failures_in_row, 0
            self._retry_at = 0.0
        if recovered:
            _log.info("alert_delivery_recovered", receiver=self.receiver, failed_attempts=recovered)

    def _back_off(self, reason: str) -> None:
        with self._wake:
            self._failed_attempts += 1
            self._failures_in_row += 1
            options = self._options
            ceiling = min(
                options.backoff_max, options.backoff_initial * 2 ** (self._failures_in_row - 1)
            )
            delay = ceiling * (0.5 + 0.5 * options.jitter())  # "equal jitter"
            self._retry_at = self._clock() + delay
            queued, failures = len(self._pending), self._failures_in_row
        _log.warning(
            "alert_delivery_failed",
            receiver=self.receiver,
            error=reason,
            queued=queued,
            failures_in_row=failures,
            retry_in_seconds=round(delay, 3),
        )

    def stats(self) -> QueueStats:
        with self._wake:
            return QueueStats(
                self.receiver,
                len(self._pending),
                self._sent,
                self._dropped,
                self._rejected,
                self._failed_attempts,
            )

    def start(self) -> None:
        """Starts the sending thread."""
        self._stopping = False
        self._thread = threading.Thread(
            target=self._run, name=f"alerts-{self.receiver}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._stopping and (not self._pending or self._clock() < self._retry_at):
                    wait = self._retry_at - self._clock() if self._pending else None
                    self._wake.wait(wait)
                if self._stopping:
                    return
            self.deliver_once()

    def stop(self, timeout: float = 2.0) -> None:
        """Stops the sending thread; a send in flight ends within its own HTTP timeout."""
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None


def _describe(error: requests.RequestException) -> str:
    """The kind of failure, without the URL (a webhook URL is a secret, path included)."""
    return type(error).__name__


def post_json(
    session: requests.Session,
    url: str,
    body: object,
    *,
    timeout: float,
    headers: dict[str, str] | None = None,
    auth: tuple[str, str] | None = None,
) -> None:
    """POSTs ``body`` as JSON; maps failures to :class:`DeliveryError` / :class:`RejectedError`."""
    try:
        response = session.post(url, json=body, timeout=timeout, headers=headers, auth=auth)
    except requests.RequestException as error:
        raise DeliveryError(_describe(error)) from None
    if 200 <= response.status_code < 300:
        return
    detail = f"HTTP {response.status_code}: {response.text[:200]}"
    if 400 <= response.status_code < 500 and response.status_code not in (408, 429):
        raise RejectedError(detail)
    raise DeliveryError(detail)
