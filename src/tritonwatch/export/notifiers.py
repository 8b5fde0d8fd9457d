"""The receivers alerts go to, built from the config's ``alerting`` section.

One notifier per configured receiver: Alertmanager (``alertmanager_url``), the direct
webhook (``webhook_url``), or both, each with its own delivery queue of
``alerting.queue_capacity``. The daemon's evaluator owns them; they are rebuilt only when
the ``alerting`` section changes.
"""

from __future__ import annotations

from tritonwatch.config.schema import Config
from tritonwatch.export.alert_queue import QueueOptions
from tritonwatch.export.alertmanager import AlertmanagerNotifier
from tritonwatch.export.interfaces import Notifier
from tritonwatch.export.webhook import WebhookNotifier


def notifiers_for(config: Config) -> list[Notifier]:
    """One notifier per configured receiver, not started."""
    alerting = config.alerting
    queue = QueueOptions(capacity=alerting.queue_capacity)
    notifiers: list[Notifier] = []
    if alerting.alertmanager_url:
        auth, token = alerting.basic_auth, alerting.bearer_token
        notifiers.append(
            AlertmanagerNotifier(
                alerting.alertmanager_url,
                basic_auth=(auth.username, auth.password.get_secret_value()) if auth else None,
                bearer_token=token.get_secret_value() if token else None,
                timeout=alerting.timeout,
                queue=queue,
            )
        )
    if alerting.webhook_url:
        notifiers.append(
            WebhookNotifier(
                alerting.webhook_url.get_secret_value(),
                repeat_interval=alerting.webhook_repeat_interval,
                timeout=alerting.timeout,
                queue=queue,
            )
        )
    return notifiers
