"""The interfaces of the export layer: what the wiring asks of an alert receiver.

A :class:`~typing.Protocol` so Alertmanager, another receiver or a test's stand-in are
interchangeable; kept apart from the classes that implement it so the layer's seams can
be read in one place. The types its signature names are imported for type checking
only: importing this module loads none of them and makes no cycle with the module that
implements it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tritonwatch.export.alert_queue import DeliveryQueue
    from tritonwatch.export.alerts import Alert


class Notifier(Protocol):
    """What the daemon needs of a receiver: hand it alerts, start and stop its sender."""

    queue: DeliveryQueue

    def notify(self, alerts: Iterable[Alert]) -> None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...
