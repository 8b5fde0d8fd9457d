"""The Alertmanager receiver: alerts to its ``POST /api/v2/alerts``, through a delivery queue.

Each batch is the latest version of each queued alert in Alertmanager's API v2 shape
(:meth:`~tritonwatch.export.alerts.Alert.to_api`); a 4xx other than 408/429 is a
rejection (not retried), everything else backs off and is tried again
(:class:`~tritonwatch.export.alert_queue.DeliveryQueue`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import requests

from tritonwatch.export.alert_queue import DeliveryQueue, QueueOptions, post_json
from tritonwatch.export.alerts import Alert


class AlertmanagerNotifier:
    """Sends alerts to Alertmanager's ``POST /api/v2/alerts`` through a :class:`DeliveryQueue`.

    Args:
        url: Alertmanager's base URL (``http://alertmanager:9093``).
        basic_auth: (username, password); bearer_token: a token for ``Authorization``.
            Both come from the config's secrets and are never logged.
        timeout: seconds for each HTTP request.
        queue: capacity, backoff and clock of the delivery queue.
    """

    def __init__(
        self,
        url: str,
        *,
        basic_auth: tuple[str, str] | None = None,
        bearer_token: str | None = None,
        timeout: float = 10.0,
        session: requests.Session | None = None,
        queue: QueueOptions | None = None,
    ) -> None:
        self._endpoint = url.rstrip("/") + "/api/v2/alerts"
        self._auth = basic_auth
        self._headers = {"Authorization": f"Bearer {bearer_token}"} if bearer_token else None
        self._timeout = timeout
        self._session = session or requests.Session()
        self.queue = DeliveryQueue("alertmanager", self._post, queue)

    def _post(self, alerts: Sequence[Alert]) -> None:
        post_json(
            self._session,
            self._endpoint,
            [alert.to_api() for alert in alerts],
            timeout=self._timeout,
            headers=self._headers,
            auth=self._auth,
        )

    def notify(self, alerts: Iterable[Alert]) -> None:
        self.queue.put(alerts)

    def start(self) -> None:
        self.queue.start()

    def stop(self) -> None:
        self.queue.stop()
        self._session.close()
