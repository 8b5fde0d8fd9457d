"""The readiness probe of each target: swapped by reloads, borrowed by readiness jobs.

Who owns what: :class:`ReadinessProbes` owns every probe and its connection. Only the
daemon's lifecycle (start, reload, apply, stop: one at a time, under its lock) swaps
them (:meth:`ReadinessProbes.swap`, :meth:`ReadinessProbes.close`); a readiness job
only borrows one for the length of a check (:meth:`ReadinessProbes.check`).

A probe that a swap replaces is closed once nobody uses it: at once when no check is
in flight, otherwise by the last check to finish with it. A reload never closes a
connection under a check that is still reading from it, and never waits for one
either (a check is bounded by the scrape timeout, a reload should not be).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from tritonwatch.config.schema import TargetConfig
from tritonwatch.probe.interfaces import ReadinessProbe
from tritonwatch.records.observations import ReadinessObservation

ProbeFactory = Callable[[TargetConfig, float], ReadinessProbe]


class _Held:
    """One probe, what it was made for, and who is using it (guarded by the owner's lock)."""

    def __init__(self, target: TargetConfig, timeout: float, probe: ReadinessProbe) -> None:
        self.target = target
        self.timeout = timeout
        self.probe = probe
        self.users = 0
        self.retired = False
        """Replaced or stopped: closed when ``users`` falls to 0."""


class ReadinessProbes:
    """Every target's readiness probe, made by ``factory``."""

    def __init__(self, factory: ProbeFactory) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._held: dict[str, _Held] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def swap(self, targets: Iterable[TargetConfig], timeout: float) -> None:
        """Probes for ``targets``: a target whose settings and timeout are unchanged keeps
        its probe (and connection); the others get a new one, and the replaced and removed
        probes are closed as soon as no check uses them."""
        idle: list[ReadinessProbe] = []
        with self._lock:
            stale, self._held = self._held, {}
            for target in targets:
                kept = stale.get(target.name)
                if kept is not None and (kept.target, kept.timeout) == (target, timeout):
                    self._held[target.name] = stale.pop(target.name)
                else:
                    made = _Held(target, timeout, self._factory(target, timeout))
                    self._held[target.name] = made
            idle = self._retire(stale.values())
        _close(idle)

    def check(self, target: str) -> ReadinessObservation | None:
        """One check of ``target``'s probe, or None when it has none. The probe cannot be
        closed while this runs; if a swap replaced it meanwhile, this closes it after."""
        with self._lock:
            held = self._held.get(target)
            if held is None:
                return None
            held.users += 1
        try:
            return held.probe.check()
        finally:
            with self._lock:
                held.users -= 1
                last = held.retired and held.users == 0
            if last:
                held.probe.close()

    def close(self) -> None:
        """Closes every probe (the daemon stops); one in a check is closed when it ends."""
        with self._lock:
            stale, self._held = self._held, {}
            idle = self._retire(stale.values())
        _close(idle)

    @staticmethod
    def _retire(held: Iterable[_Held]) -> list[ReadinessProbe]:
        """Marks ``held`` retired (the caller holds the lock); returns those nobody uses,
        for the caller to close once it let go of the lock."""
        idle = []
        for each in held:
            each.retired = True
            if each.users == 0:
                idle.append(each.probe)
        return idle


def _close(probes: Iterable[ReadinessProbe]) -> None:
    for probe in probes:
        probe.close()
