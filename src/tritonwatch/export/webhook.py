"""A direct webhook notifier for users without Alertmanager (docs/design.md §9).

It posts the payload Alertmanager's webhook receiver posts (``"version": "4"``), so a
receiver written for Alertmanager works unchanged. Because nothing deduplicates in
between, it does part of Alertmanager's job itself: alerts are grouped by target and
model (as the shipped ``alertmanager.yml`` groups them), and an alert is notified when
it starts firing, when it resolves, and again every ``repeat_interval`` (4 h, as
Alertmanager's default) while it keeps firing — not at every re-send of the alert board.
Delivery is at least once: a failed batch is retried whole, with backoff.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import requests

from tritonwatch.export.alert_queue import DeliveryQueue, QueueOptions, post_json
from tritonwatch.export.alerts import Alert, rfc3339

GROUP_BY = ("target", "model")
DEFAULT_REPEAT_INTERVAL = 4 * 3600.0


def _common(maps: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """The name/value pairs every map shares."""
    if not maps:
        return {}
    first = maps[0]
    return {k: v for k, v in first.items() if all(m.get(k) == v for m in maps[1:])}


def webhook_payload(
    alerts: Sequence[Alert], *, receiver: str = "tritonwatch", external_url: str = ""
) -> dict[str, Any]:
    """Alertmanager's webhook body (version 4) for one group of alerts."""
    group = {name: alerts[0].labels.get(name, "") for name in GROUP_BY}
    group_key = "{}:{" + ", ".join(f'{k}="{v}"' for k, v in group.items()) + "}"
    return {
        "version": "4",
        "groupKey": group_key,
        "truncatedAlerts": 0,
        "status": "resolved" if all(a.resolved for a in alerts) else "firing",
        "receiver": receiver,
        "groupLabels": group,
        "commonLabels": _common([a.labels for a in alerts]),
        "commonAnnotations": _common([a.annotations for a in alerts]),
        "externalURL": external_url,
        "alerts": [
            {
                "status": "resolved" if a.resolved else "firing",
                "labels": dict(a.labels),
                "annotations": dict(a.annotations),
                "startsAt": rfc3339(a.starts_at),
                # Alertmanager sends the zero time for alerts still firing.
                "endsAt": rfc3339(a.ends_at) if a.resolved else "0001-01-01T00:00:00Z",
                "generatorURL": a.generator_url,
                "fingerprint": a.fingerprint,
            }
            for a in alerts
        ],
    }


def _groups(alerts: Sequence[Alert]) -> list[list[Alert]]:
    grouped: dict[tuple[str, ...], list[Alert]] = {}
    for alert in alerts:
        grouped.setdefault(tuple(alert.labels.get(n, "") for n in GROUP_BY), []).append(alert)
    return list(grouped.values())


class WebhookNotifier:
    """Posts state changes of alerts to ``url`` as Alertmanager webhook payloads.

    Args:
        url: the receiver; a secret (it often embeds a token) and never logged.
        repeat_interval: seconds before a still-firing alert is notified again.
        clock: Unix seconds, for the repeat interval.
    """

    def __init__(
        self,
        url: str,
        *,
        repeat_interval: float = DEFAULT_REPEAT_INTERVAL,
        external_url: str = "",
        timeout: float = 10.0,
        session: requests.Session | None = None,
        queue: QueueOptions | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._url = url
        self._repeat_interval = repeat_interval
        self._external_url = external_url
        self._timeout = timeout
        self._session = session or requests.Session()
        self._clock = clock
        self._lock = threading.Lock()
        self._notified_firing: dict[str, float] = {}
        """fingerprint → when it was last notified as firing (until notified resolved)."""
        self.queue = DeliveryQueue("webhook", self._post, queue)

    def _post(self, alerts: Sequence[Alert]) -> None:
        for group in _groups(alerts):
            payload = webhook_payload(group, external_url=self._external_url)
            post_json(self._session, self._url, payload, timeout=self._timeout)

    def notify(self, alerts: Iterable[Alert]) -> None:
        """Queues the alerts whose state changed, or whose repeat interval passed."""
        now = self._clock()
        due = []
        with self._lock:
            for alert in alerts:
                key = alert.fingerprint
                last = self._notified_firing.get(key)
                if alert.resolved:
                    if last is None:
                        continue  # its resolution was sent already, or it never fired here
                    del self._notified_firing[key]
                elif last is not None and now - last < self._repeat_interval:
                    continue
                else:
                    self._notified_firing[key] = now
                due.append(alert)
        self.queue.put(due)

    def start(self) -> None:
        self.queue.start()

    def stop(self) -> None:
        self.queue.stop()
        self._session.close()
