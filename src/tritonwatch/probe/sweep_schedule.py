"""Sweeps scheduled by the daemon: which models, how, and where the results go.

A scheduled sweep loads a production server on purpose, so it is off unless the
config enables it, its levels are capped (``sweep.max_concurrency``, and a hard cap
no config can lift), and the model's canary pauses while it runs so the canary's
SLI is not polluted by the sweep's queueing. The budget is the model's latency SLO
threshold.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from tritonwatch.config.schema import Config
from tritonwatch.logs import get_logger
from tritonwatch.probe.sweep import SweepResult, SweepRunner, SweepSettings

_log = get_logger("sweep")
PauseCanary = Callable[[str, str, bool], None]
"""(target, model, paused)."""


@dataclass(frozen=True, slots=True)
class SweepPlan:
    target: str
    model: str
    interval: float
    settings: SweepSettings

    @property
    def key(self) -> tuple[str, str]:
        return (self.target, self.model)


def sweep_plans(config: Config) -> list[SweepPlan]:
    """One plan per model whose (merged) sweep section is enabled."""
    plans = []
    for target in config.targets:
        for model in target.models:
            sweep = config.sweep_for(model)
            if not sweep.enabled:
                continue
            if target.production and not sweep.allow_production:
                _log.warning("sweep_skipped_production", target=target.name, model=model.name)
                continue
            canary = config.canary_for(target, model)
            protocol: Literal["http", "grpc"] = "grpc" if canary.protocol == "grpc" else "http"
            url = target.effective_grpc_url if protocol == "grpc" else target.effective_http_url
            settings = SweepSettings(
                url=url,
                model=model.name,
                version=model.version,
                protocol=protocol,
                levels=tuple(float(c) for c in sweep.concurrency if c <= sweep.max_concurrency),
                budget_p95=config.slo_for(model).latency.threshold,
                window_seconds=sweep.measurement_interval,
                max_windows=sweep.max_windows,
                max_processes=1,  # the daemon stays one process; `tritonwatch sweep` scales out
                inputs=dict(canary.inputs),
                data=canary.data,
                string_length=canary.string_length,
                string_data=canary.string_data,
                tls=target.client_tls,
            )
            plans.append(SweepPlan(target.name, model.name, sweep.interval, settings))
    return plans


class SweepBoard:
    """The latest result per (target, model); thread-safe; pruned to configured models."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._results: dict[tuple[str, str], tuple[SweepResult, float]] = {}

    def declare(self, keys: Iterable[tuple[str, str]]) -> None:
        wanted = set(keys)
        with self._lock:
            self._results = {k: v for k, v in self._results.items() if k in wanted}

    def record(self, key: tuple[str, str], result: SweepResult, finished_at: float) -> None:
        with self._lock:
            self._results[key] = (result, finished_at)

    def snapshot(self) -> dict[tuple[str, str], tuple[SweepResult, float]]:
        with self._lock:
            return dict(self._results)


def run_scheduled_sweep(
    plan: SweepPlan,
    board: SweepBoard,
    pause_canary: PauseCanary,
    stop: threading.Event,
    wall_clock: Callable[[], float],
) -> None:
    """Runs one plan with the model's canary paused; never raises (a job must not die)."""
    pause_canary(plan.target, plan.model, True)
    _log.info(
        "sweep_started", target=plan.target, model=plan.model, levels=list(plan.settings.levels)
    )
    try:
        result = SweepRunner(plan.settings, stop).run()
    except Exception as error:  # an unreachable server or odd model: log, keep the daemon
        _log.warning("sweep_failed", target=plan.target, model=plan.model, error=str(error)[:300])
        return
    finally:
        pause_canary(plan.target, plan.model, False)
    board.record(plan.key, result, wall_clock())
    _log.info(
        "sweep_finished",
        target=plan.target,
        model=plan.model,
        knee=result.knee.concurrency if result.knee else None,
        operating_point=result.operating_point.level if result.operating_point else None,
        stopped_at_budget=result.stopped_at_budget,
        warnings=list(result.warnings),
    )
