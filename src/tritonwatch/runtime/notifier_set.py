"""The evaluator's notifiers, replaced by a reload only once no evaluation still hands
them alerts.

Three threads touch them: the evaluation job's (:meth:`Evaluator.evaluate` hands each
notifier the alerts due), the exporter's (their queues' counters for ``/metrics``) and
the main thread's (a reload that changes ``alerting`` builds new notifiers and stops the
old, :meth:`Evaluator.apply`). Stopping a notifier an evaluation is still handing alerts
to would leave those alerts in a stopped queue, never sent. So a swap puts the new
notifiers in force at once (an evaluation that begins after it uses them) and gives the
old ones back to be stopped only when every evaluation that took them is done with them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from tritonwatch.export.interfaces import Notifier


class NotifierSet:
    """The notifiers in force, and who is handing them alerts.

    Owner: the evaluator. :meth:`swap` runs on the main thread (a reload), :meth:`using`
    on the evaluation's; the condition guards the notifiers in force, their generation
    and the count of users per generation. A user holds them only to hand alerts to
    their queues (no I/O: the queues' own threads send), so a swap waits that long.
    """

    def __init__(self, notifiers: Sequence[Notifier]) -> None:
        self._changed = threading.Condition()
        self._current: tuple[Notifier, ...] = tuple(notifiers)
        self._generation = 0
        """How many swaps there were: the notifiers in force are this generation's."""
        self._users: dict[int, int] = {}
        """Users by the generation they took (none left: the key goes)."""

    def current(self) -> tuple[Notifier, ...]:
        """The notifiers in force, to start, stop or read counters of (not to notify:
        :meth:`using`)."""
        with self._changed:
            return self._current

    @contextmanager
    def using(self) -> Iterator[tuple[Notifier, ...]]:
        """The notifiers in force, which no swap gives back to be stopped before the
        block ends."""
        with self._changed:
            generation, notifiers = self._generation, self._current
            self._users[generation] = self._users.get(generation, 0) + 1
        try:
            yield notifiers
        finally:
            with self._changed:
                self._users[generation] -= 1
                if not self._users[generation]:
                    del self._users[generation]
                self._changed.notify_all()

    def swap(self, notifiers: Sequence[Notifier]) -> tuple[Notifier, ...]:
        """Puts ``notifiers`` in force now and returns the ones they replace once no
        user still holds those (start the new ones before, stop the old ones after)."""
        with self._changed:
            replaced, stale = self._generation, self._current
            self._current, self._generation = tuple(notifiers), replaced + 1
            self._changed.wait_for(lambda: all(taken > replaced for taken in self._users))
        return stale
