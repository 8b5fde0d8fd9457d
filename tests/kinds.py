"""What kind of test each test is, and a guard that keeps the kinds honest.

Every test has exactly one of four markers (``tests/README.md``):

* ``unit``: no simulator, no subprocess, no server program (an in-process loopback fake
  of the test's own is fine). The default for a test that declares nothing.
* ``sim``: the simulator, in this process or spawned (``SimProcess``); no other program.
* ``real``: a real program in a process of its own — tritonserver, MLServer,
  perf_analyzer, Prometheus, Alertmanager, promtool, amtool, Chromium, openssl, or
  ``tritonwatch`` itself run as a command.
* ``bench``: a measurement (a speed, a ratio, an accuracy against another tool); never
  in ``make test``, run by ``make bench-tests``.

A test that uses one of the fixtures below is at least of that fixture's kind. While a
``unit`` or ``sim`` test sets up and runs, starting what its kind forbids fails it with
a message naming the marker it needs: a marker cannot silently lie.
"""

from __future__ import annotations

import multiprocessing.process
import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest

KINDS = ("unit", "sim", "real", "bench")
"""Lightest first: a test is of the heaviest kind it declares or its fixtures imply."""

FIXTURE_KINDS = {
    "sim": "sim",
    "start_sim": "sim",
    "real_triton": "real",
    "start_real_triton": "real",
    "real_mlserver": "real",
}

SHARED_SERVER_GROUPS = ("real_triton", "real_mlserver")
"""Session fixtures whose users run on one xdist worker, so each server starts once."""
SECOND_REAL_TRITON = "real_triton_b"
"""The xdist group of the real-Triton modules that run on a second worker with its own
shared server (one more start): the longest ones (tune, the daemon end to end, the TTFT
burn, capacity), so that the two servers' tests run side by side instead of one after another."""


class KindError(Exception):
    """A test started something its marker forbids."""


def kind_of(item: pytest.Item) -> str:
    """The one kind of ``item``: what it declares, which must be at least what its
    fixtures imply; ``unit`` when it declares nothing."""
    declared = {mark.name for mark in item.iter_markers() if mark.name in KINDS}
    if len(declared) > 1:
        raise pytest.UsageError(f"{item.nodeid}: one kind marker only, got {sorted(declared)}")
    names = getattr(item, "fixturenames", ())
    implied = max(
        (FIXTURE_KINDS[name] for name in names if name in FIXTURE_KINDS),
        key=KINDS.index,
        default="unit",
    )
    kind = declared.pop() if declared else implied
    if KINDS.index(kind) < KINDS.index(implied):
        raise pytest.UsageError(f"{item.nodeid}: marked {kind}, but its fixtures make it {implied}")
    return kind


def classify(items: list[pytest.Item]) -> None:
    """Gives each test its kind marker and its shared server's xdist group."""
    for item in items:
        kind = kind_of(item)
        if item.get_closest_marker(kind) is None:
            item.add_marker(getattr(pytest.mark, kind))
        item.stash[KIND] = kind
        names = getattr(item, "fixturenames", ())
        group = next((name for name in SHARED_SERVER_GROUPS if name in names), None)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))


KIND = pytest.StashKey[str]()


def _refuse(kind: str, what: str, needs: str) -> Callable[..., Any]:
    def refuse(*_: Any, **__: Any) -> Any:
        raise KindError(f"a {kind} test {what}: mark it {needs}")

    return refuse


@contextmanager
def guarded(item: pytest.Item) -> Iterator[None]:
    """Forbids, for the duration, what ``item``'s kind may not start."""
    kind = item.stash.get(KIND, "unit")
    with ExitStack() as stack:
        patch = pytest.MonkeyPatch()
        stack.callback(patch.undo)
        if kind in ("unit", "sim"):
            patch.setattr(
                subprocess.Popen,
                "_execute_child",
                _refuse(kind, "started a subprocess", "real"),
            )
        if kind == "unit":
            from tritonwatch.sim.server import Simulator

            patch.setattr(Simulator, "start", _refuse(kind, "started the simulator", "sim"))
            patch.setattr(
                multiprocessing.process.BaseProcess,
                "start",
                _refuse(kind, "started a process", "sim or real"),
            )
        yield
