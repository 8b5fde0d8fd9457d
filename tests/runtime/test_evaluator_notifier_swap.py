"""R5: a reload that replaces the notifiers while an evaluation hands them alerts.

The evaluation job's thread is held inside a notifier's ``notify`` with threading
events while a reload (``Evaluator.apply``, the main thread) builds new notifiers; no
sleeps, the same interleaving on every run.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import pytest
from prometheus_client import CollectorRegistry

from tritonwatch.config import parse_config
from tritonwatch.export.alerts import Alert
from tritonwatch.runtime import evaluator as evaluator_module
from tritonwatch.runtime.evaluator import Evaluator
from tritonwatch.scrape.triton_scrapers import TritonScrapers
from tritonwatch.state.canary_board import CanaryBoard

WAIT = 10.0
"""Real seconds a held thread or an awaited event may take (each takes milliseconds)."""
CONFIG = """
alerting: {{webhook_url: "http://127.0.0.1:9/{hook}"}}
targets:
  - name: t
    url: http://127.0.0.1:1
    models: [{{name: m}}]
"""


class Notifier:
    """A receiver that writes down, at each ``notify``, whether it had been stopped; the
    first notify of a ``held`` one waits (``entered`` set) until ``release``."""

    def __init__(self, held: bool, started: threading.Event) -> None:
        self.held = held
        self.entered = threading.Event()
        self.release = threading.Event()
        self.started = started
        self.stopped = threading.Event()
        self.stopped_at_notify: list[bool] = []

    def notify(self, alerts: Iterable[Alert]) -> None:
        if self.held and not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(WAIT), "the test never released the evaluation"
        self.stopped_at_notify.append(self.stopped.is_set())

    def start(self) -> None:
        self.started.set()

    def stop(self) -> None:
        self.stopped.set()


def test_a_reload_never_stops_a_notifier_an_evaluation_is_handing_alerts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Breaks if a reload that changes ``alerting`` stops the old receivers while an
    evaluation is still handing them its alerts (they would go to a stopped queue and
    never leave), or if the next evaluation does not reach the new ones."""
    made: list[Notifier] = []
    old_started, new_started = threading.Event(), threading.Event()

    def notifiers_for(config: object) -> list[Notifier]:
        first = not made  # the old one: it holds its first notify
        made.append(Notifier(held=first, started=old_started if first else new_started))
        return [made[-1]]

    monkeypatch.setattr(evaluator_module, "notifiers_for", notifiers_for)
    evaluator = Evaluator(
        parse_config(CONFIG.format(hook="old"), "old.yaml"),
        canary_board=CanaryBoard(),
        triton=TritonScrapers(),
        judged_states=list,  # nothing scraped
        registry=CollectorRegistry(),
        clock=lambda: 1000.0,
        wall_clock=lambda: 1_700_000_000.0,
    )
    evaluator.start("http://127.0.0.1:9")
    (old,) = made
    new_config = parse_config(CONFIG.format(hook="new"), "new.yaml")
    evaluating = threading.Thread(target=evaluator.evaluate)
    applying = threading.Thread(target=evaluator.apply, args=(new_config, new_config))
    evaluating.start()
    try:
        assert old.entered.wait(WAIT), "the evaluation never reached the old notifier"
        applying.start()  # the reload, while the evaluation is inside old.notify
        # The new receivers run before the old ones may be stopped; with today's order
        # (stop, then start) they run once the old ones are stopped.
        assert new_started.wait(WAIT), "the reload never started new receivers"
    finally:
        old.release.set()
        evaluating.join(WAIT)
        if applying.ident is not None:
            applying.join(WAIT)
    assert not evaluating.is_alive() and not applying.is_alive()
    new = made[1]
    assert old.stopped_at_notify == [False]  # handed over while its queue still ran
    assert old.stopped.is_set() and not new.stopped.is_set()
    assert old_started.is_set()
    evaluator.evaluate()
    assert old.stopped_at_notify == [False]
    assert new.stopped_at_notify == [False]
    evaluator.stop()
    assert new.stopped.is_set()
