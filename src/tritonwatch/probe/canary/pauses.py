"""Which models' canaries hold back while a sweep of the model runs, and since when not.

A scheduled sweep loads a model on purpose, so the model's canary pauses meanwhile
(runtime/scheduled_sweeps.py). The pause belongs to the model, not to a canary object:
a reload restarts a changed canary (a new object), and a plain canary that finds its
model decoupled hands over to a streaming one; a flag on the canary had to be copied
across both, and a pause or resume that came in between was lost (a resumed model whose
replacement stayed paused went unwatched: paused canaries are not judged for stalls).
So the runner owns one :class:`Pauses` and every canary it makes reads it.
"""

from __future__ import annotations

TargetModel = tuple[str, str]


class Pauses:
    """The paused models, and when each last resumed.

    Owner: the canary runner, whose ``set_paused`` (a sweep job's thread) is the only
    writer. Readers: each canary at every send (``SendGates.allows``, on the engine's
    thread or the event loop's) and liveness (``CanaryRunner.stalled``, the evaluation's
    thread). No lock: each write is one ``set.add``, ``set.discard`` or dict store, and
    each read one membership test or ``dict.get``, each atomic under the GIL; a resume
    stores its time before it lifts the pause, so a reader that sees the model resumed
    sees when.
    """

    def __init__(self) -> None:
        self._paused: set[TargetModel] = set()
        self._resumed: dict[TargetModel, float] = {}
        """When each model's pause last ended (the canaries' clock, ``time.monotonic``)."""

    def set(self, target: str, model: str, paused: bool, now: float) -> None:
        """Pauses ``target``'s ``model`` or resumes it at ``now``."""
        key = (target, model)
        if paused:
            self._paused.add(key)
        elif key in self._paused:
            self._resumed[key] = now
            self._paused.discard(key)

    def holds(self, target: str, model: str) -> bool:
        """Whether the model's canaries hold back now."""
        return (target, model) in self._paused

    def owed_since(self, target: str, model: str, began: float | None) -> float | None:
        """From when a canary of the model that began sending at ``began`` owes outcomes:
        then, or its model's last resume if later (its silence while paused is no
        stall); None while it has not begun."""
        resumed = self._resumed.get((target, model))
        if began is None or resumed is None:
            return began
        return max(began, resumed)
