"""The latest readiness observation per target, shared by the probe jobs and the exporter."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from tritonwatch.records.observations import ReadinessObservation


class ReadinessBoard:
    """Thread-safe map target → latest :class:`ReadinessObservation`.

    Only configured targets are kept: a probe finishing after its target was removed
    by a reload must not bring the removed target's series back.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._targets: frozenset[str] = frozenset()
        self._latest: dict[str, ReadinessObservation] = {}

    def set_targets(self, targets: Iterable[str]) -> None:
        """Declares the configured targets and prunes every other one."""
        with self._lock:
            self._targets = frozenset(targets)
            self._latest = {t: o for t, o in self._latest.items() if t in self._targets}

    def record(self, observation: ReadinessObservation) -> ReadinessObservation | None:
        """Stores ``observation``; returns the one it replaced (None if first or unknown)."""
        with self._lock:
            if observation.target not in self._targets:
                return None
            previous = self._latest.get(observation.target)
            self._latest[observation.target] = observation
            return previous

    def snapshot(self) -> dict[str, ReadinessObservation]:
        with self._lock:
            return dict(self._latest)
