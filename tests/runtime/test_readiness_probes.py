"""ReadinessProbes: reloads swap the probes, readiness jobs borrow them (R6).

A swap keeps the probe of an unchanged target, makes new ones for the rest, and closes
a replaced probe only once no check is inside it: at once when idle, otherwise by the
check that leaves it last. Checks are held by events; nothing here sleeps.
"""

from __future__ import annotations

import threading
import time

from tritonwatch.config.schema import TargetConfig
from tritonwatch.records.observations import Outcome, ReadinessObservation
from tritonwatch.runtime.readiness_probes import ReadinessProbes

WAIT = 30.0


class Probe:
    def __init__(self, target: TargetConfig) -> None:
        self.target = target
        self.inside = 0
        self.closes = 0
        self.closed_under_a_check = False
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.release.set()  # not held unless a test clears it

    def check(self) -> ReadinessObservation:
        self.inside += 1
        self.arrived.set()
        self.release.wait(WAIT)
        self.inside -= 1
        now = time.monotonic()
        return ReadinessObservation(self.target.name, now, Outcome.SUCCESS, True, 0.0, "")

    def close(self) -> None:
        self.closed_under_a_check |= self.inside > 0
        self.closes += 1


class Factory:
    def __init__(self) -> None:
        self.made: list[Probe] = []

    def __call__(self, target: TargetConfig, timeout: float) -> Probe:
        self.made.append(Probe(target))
        return self.made[-1]


def _target(name: str, port: int = 1) -> TargetConfig:
    return TargetConfig.model_validate({"name": name, "url": f"http://127.0.0.1:{port}"})


def _check_on_a_thread(probes: ReadinessProbes, target: str) -> threading.Thread:
    thread = threading.Thread(target=probes.check, args=(target,), daemon=True)
    thread.start()
    return thread


def test_a_swap_keeps_unchanged_probes_and_closes_idle_replaced_ones_at_once() -> None:
    """Breaks if an unchanged target's probe (its connection) is rebuilt, or if a probe
    that nobody uses is left open after a swap replaced or removed it."""
    factory = Factory()
    probes = ReadinessProbes(factory)
    probes.swap([_target("a"), _target("b"), _target("c")], 1.0)
    a, b, c = factory.made
    probes.swap([_target("a"), _target("b", port=2)], 1.0)
    assert [p.target.name for p in factory.made] == ["a", "b", "c", "b"]
    assert (a.closes, b.closes, c.closes, factory.made[3].closes) == (0, 1, 1, 0)
    assert len(probes) == 2
    probes.swap([_target("a"), _target("b", port=2)], 2.0)  # another timeout: new probes
    assert (a.closes, factory.made[3].closes) == (1, 1)
    observation = probes.check("a")
    assert observation is not None and observation.target == "a"
    assert probes.check("gone") is None


def test_a_probe_replaced_under_a_check_is_closed_by_that_check_when_it_ends() -> None:
    """Breaks if a swap (a reload) or the daemon's stop closes a probe while a
    readiness job is inside its ``check()``, or if such a probe is never closed."""
    factory = Factory()
    probes = ReadinessProbes(factory)
    probes.swap([_target("a"), _target("b")], 1.0)
    a, b = factory.made
    a.release.clear()
    b.release.clear()
    in_a, in_b = _check_on_a_thread(probes, "a"), _check_on_a_thread(probes, "b")
    assert a.arrived.wait(WAIT) and b.arrived.wait(WAIT)
    probes.swap([_target("a", port=2), _target("b")], 1.0)  # replaces a, keeps b
    probes.close()  # the stop: b too
    assert (a.closes, b.closes) == (0, 0)
    a.release.set()
    in_a.join(WAIT)
    assert (a.closes, b.closes) == (1, 0)
    b.release.set()
    in_b.join(WAIT)
    assert (a.closes, b.closes) == (1, 1)
    assert not a.closed_under_a_check and not b.closed_under_a_check
    assert factory.made[2].closes == 1  # the new a, idle at the stop: closed at once
