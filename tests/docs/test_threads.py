"""docs/architecture.md names every thread, process and lock the code makes, and its owner.

The part between ``<!-- generated: threads -->`` and ``<!-- end: threads -->`` is read
off ``src/tritonwatch`` by scripts/generate_docs.py (an ``ast`` walk); the tables after it
are written by hand: who starts and stops each thread, what it owns, what each lock
guards, and the order locks are taken in. These tests fail when the code gains a thread
or a lock that the hand-written part does not account for, when the hand-written part
names one the code no longer has, and when two locks nested in the code contradict the
written order.
"""

from __future__ import annotations

import re
from types import ModuleType

import pytest

from support import REPO

ARCHITECTURE = REPO / "docs" / "architecture.md"
KEY_ROW = re.compile(r"^\| `([\w/]+\.py::[\w.]+)` \|", re.M)


def _hand_written() -> tuple[str, str, str]:
    """The section's text after the generated part: owners, locks, lock order."""
    text = ARCHITECTURE.read_text()
    after = text.split("<!-- end: threads -->", 1)[1]
    section = after.split("\n## ", 1)[0]
    owners, rest = section.split("### Locks: what each guards", 1)
    locks, order = rest.split("### Lock order", 1)
    return owners, locks, order


def test_the_walk_finds_the_known_threads_and_locks(generator: ModuleType) -> None:
    """Breaks if the AST walk stops seeing the threads, processes and locks it must see."""
    threads, locks, nested = generator.concurrency_sites()
    names = {name for _, _, name in threads}
    assert {"canary", "canary-engine", "exporter-http", "alerts-{self.receiver}", "load"} <= names
    kinds = {kind for _, kind, _ in threads}
    assert {"process", "thread pool", "scheduler thread", "asyncio default executor"} <= kinds
    assert {"grpc channel", "grpc server", "thread per request", "timer thread"} <= kinds
    made = dict(locks)
    assert made["runtime/daemon.py::Daemon._lifecycle"] == "threading.RLock"
    assert made["probe/runner.py::CanaryRunner._turn"] == "asyncio.Lock"
    assert made["runtime/notifier_set.py::NotifierSet._changed"] == "threading.Condition"
    assert (
        "scrape/target_scraper.py::TargetScraper._cycle_lock",
        "scrape/target_scraper.py::TargetScraper._lock",
    ) in nested


def test_every_thread_has_an_owner_entry(generator: ModuleType) -> None:
    """Breaks if a thread or process starts somewhere in src/ without a hand-written row
    saying who starts and stops it and what it owns, or a row outlives its code."""
    threads, _, _ = generator.concurrency_sites()
    owners, _, _ = _hand_written()
    written = KEY_ROW.findall(owners)
    assert len(written) == len(set(written)), "a thread is described twice"
    assert set(written) == {key for key, _, _ in threads}


def test_every_lock_has_a_guards_entry(generator: ModuleType) -> None:
    """Breaks if a lock is added to src/ without a hand-written row saying what it guards,
    or a row names a lock the code no longer has."""
    _, locks, _ = generator.concurrency_sites()
    _, written_locks, _ = _hand_written()
    written = KEY_ROW.findall(written_locks)
    assert len(written) == len(set(written)), "a lock is described twice"
    assert set(written) == {key for key, _ in locks}


def test_nested_locks_follow_the_written_order(generator: ModuleType) -> None:
    """Breaks if code takes one lock inside another that the lock order does not put
    first, or if the order names a lock the code no longer has."""
    _, locks, nested = generator.concurrency_sites()
    _, _, order = _hand_written()
    for outer, inner in nested:
        assert f"`{outer}`" in order and f"`{inner}`" in order, (outer, inner)
        assert order.index(f"`{outer}`") < order.index(f"`{inner}`"), (outer, inner)
    named = set(re.findall(r"`([\w/]+\.py::[\w.]+)`", order))
    assert named <= {key for key, _ in locks}


def test_a_new_lock_without_an_entry_is_caught(
    generator: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Breaks if the checks cannot see a lock the document does not describe."""
    threads, locks, nested = generator.concurrency_sites()
    grown = (threads, [*locks, ("runtime/newcomer.py::Newcomer._lock", "threading.Lock")], nested)
    monkeypatch.setattr(generator, "concurrency_sites", lambda: grown)
    assert generator.stale_parts([ARCHITECTURE]) == ["docs/architecture.md: threads"]
    with pytest.raises(AssertionError):
        test_every_lock_has_a_guards_entry(generator)
