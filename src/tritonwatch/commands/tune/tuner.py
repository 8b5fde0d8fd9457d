"""The tuning loop: budget first; sweep; one change; sweep (twice if it looks worse); keep
or roll back; repeat.

Without ``apply`` it only measures and prints the first change it would try. With it,
the server's config is changed through the repository API one field at a time; on
Ctrl-C, SIGTERM or any error in the middle of a step, the last kept config is put
back before the tuner returns.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tritonwatch.analysis.experiments import Verdict
from tritonwatch.analysis.sweep_verdict import judge_sweep
from tritonwatch.commands.tune.candidates import Change, candidates
from tritonwatch.commands.tune.gpu_probe import gpu_utilization_probe, model_gpu_indices
from tritonwatch.commands.tune.judge import Judgement, judge
from tritonwatch.commands.tune.repository import ModelRepository
from tritonwatch.common.logs import get_logger
from tritonwatch.records.sweep_records import SweepResult, SweepSettings, SweepSteps
from tritonwatch.sweep.load_sweep import SweepRunner

_log = get_logger("tune")


class TuneInterruptedError(Exception):
    """Stopped by a signal; the last kept config was restored."""


@dataclass(frozen=True, slots=True)
class TuneStep:
    step: int
    change: Change | None
    """None for the baseline measurement."""
    throughput: float | None
    """Inferences/s at the operating point (None when nothing fits the budget)."""
    p95: float | None
    verdict: str
    reason: str


@dataclass(slots=True)
class TuneResult:
    original: dict[str, Any]
    final: dict[str, Any]
    history: list[TuneStep] = field(default_factory=list)
    plan: Change | None = None
    """Without ``apply``: the change that would be tried first."""
    interrupted: bool = False


Report = Callable[[str], None]
Propose = Callable[[dict[str, Any], SweepResult, float], list[Change]]
"""(current config, last kept sweep, budget) → candidate changes, best first."""
Measure = Callable[[SweepSettings], SweepSteps]
"""Measures one sweep of the server as it is now configured (default: ``SweepRunner``)."""


def _summary(sweep: SweepResult) -> tuple[float | None, float | None]:
    point = sweep.operating_point
    if point is not None:
        return point.inferences_per_second, point.p95
    first = sweep.steps[0] if sweep.steps else None
    return None, first.p95 if first else None


class Tuner:
    def __init__(
        self,
        sweep: SweepSettings,
        *,
        apply: bool,
        max_steps: int,
        stop: threading.Event | None = None,
        report: Report | None = None,
        propose: Propose = candidates,
        metrics_url: str | None = None,
        measure: Measure | None = None,
    ) -> None:
        if sweep.budget_p95 is None:
            raise ValueError("tune needs a p95 budget")
        self._settings = sweep
        self._budget = sweep.budget_p95
        self._apply = apply
        self._max_steps = max_steps
        self._stop = stop or threading.Event()
        self._report = report or (lambda _: None)
        self._propose = propose
        self._metrics_url = metrics_url
        self._measure = measure
        self._config_now: dict[str, Any] = {}

    def _sweep(self) -> SweepResult:
        if self._measure is not None:
            return self._judged(self._measure(self._settings))
        probe = None
        if self._metrics_url:
            probe = gpu_utilization_probe(
                self._metrics_url,
                lambda: model_gpu_indices(self._config_now),
                tls=self._settings.tls,
            )
        return self._judged(SweepRunner(self._settings, self._stop, gpu_probe=probe).run())

    def _judged(self, steps: SweepSteps) -> SweepResult:
        result = judge_sweep(steps)
        if self._stop.is_set():
            raise TuneInterruptedError
        return result

    def _measured_twice_if_worse(
        self, kept: SweepResult, step: int
    ) -> tuple[SweepResult, Judgement]:
        """The trial's sweep and verdict; a verdict against the change is re-measured
        once before it stands, so one noisy sweep (a busy neighbour, a GC pause in the
        server) does not revert a change that helps. Both must say so to revert."""
        after = self._sweep()
        verdict = judge(kept, after)
        if verdict.verdict == Verdict.KEEP:
            return after, verdict
        self._report(f"step {step}: {verdict.verdict} ({verdict.reason}); measuring once more")
        _log.info("tune_remeasure", step=step, verdict=str(verdict.verdict), reason=verdict.reason)
        again = self._sweep()
        second = judge(kept, again)
        return (again, second) if second.verdict == Verdict.KEEP else (after, verdict)

    def run(self) -> TuneResult:
        repository = ModelRepository(
            self._settings.url, self._settings.model, self._settings.version, self._settings.tls
        )
        try:
            return self._run(repository)
        finally:
            repository.close()

    def _run(self, repository: ModelRepository) -> TuneResult:
        original = repository.config()
        self._config_now = original
        result = TuneResult(original, original)
        self._report("measuring the baseline")
        kept_sweep = self._sweep()
        throughput, p95 = _summary(kept_sweep)
        result.history.append(TuneStep(0, None, throughput, p95, "baseline", "current config"))
        options = self._propose(original, kept_sweep, self._budget)
        if not self._apply:
            result.plan = options[0] if options else None
            return result
        repository.apply(original)  # refuses at once when not in explicit mode; changes nothing
        kept = original
        seen = {json.dumps(original, sort_keys=True)}
        try:
            for step in range(1, self._max_steps + 1):
                fresh = [
                    c
                    for c in self._propose(kept, kept_sweep, self._budget)
                    if json.dumps(c.apply(kept), sort_keys=True) not in seen
                ]
                if not fresh:
                    self._report("no candidate left: done")
                    break
                change = fresh[0]
                trial = change.apply(kept)
                seen.add(json.dumps(trial, sort_keys=True))
                self._report(
                    f"step {step}: {change.parameter} {change.current!r} → {change.proposed!r}"
                )
                repository.apply(trial)
                self._config_now = trial
                after, verdict = self._measured_twice_if_worse(kept_sweep, step)
                throughput, p95 = _summary(after)
                result.history.append(
                    TuneStep(step, change, throughput, p95, verdict.verdict, verdict.reason)
                )
                _log.info(
                    "tune_step",
                    step=step,
                    parameter=change.parameter,
                    proposed=change.proposed,
                    verdict=str(verdict.verdict),
                    reason=verdict.reason,
                )
                if verdict.verdict == Verdict.KEEP:
                    kept, kept_sweep = trial, after
                else:
                    repository.apply(kept)
                    self._config_now = kept
        except BaseException:
            # Ctrl-C, SIGTERM or a failure mid-step: put the last kept config back first.
            repository.apply(kept)
            result.final = kept
            result.interrupted = True
            self._report("restored the last kept config")
            raise
        result.final = kept
        return result
