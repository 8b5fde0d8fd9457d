"""Sweeps scheduled by the daemon: which models, and how.

A scheduled sweep loads a production server on purpose, so it is off unless the
config enables it, and its levels are capped (``sweep.max_concurrency``, and a hard
cap no config can lift). The budget is the model's latency SLO threshold. Running a
plan (with the model's canary paused) is the wiring's: :mod:`tritonwatch.runtime.scheduled_sweeps`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tritonwatch.common.logs import get_logger
from tritonwatch.config.schema import Config
from tritonwatch.records.sweep_records import SweepSettings

_log = get_logger("sweep")


@dataclass(frozen=True, slots=True)
class SweepPlan:
    target: str
    model: str
    interval: float
    settings: SweepSettings
    open_loop_check: bool = True
    first_run_after: float = 60.0
    """``sweep.first_run_after``: when the first run is due after the job is added."""
    """Check the closed loop's capacity with request-rate steps (``capacity.open_loop_check``)."""

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
            if canary.protocol == "openai":  # an OpenAI server has no KServe v2 API to sweep
                _log.warning("sweep_skipped_openai", target=target.name, model=model.name)
                continue
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
            plans.append(
                SweepPlan(
                    target.name,
                    model.name,
                    sweep.interval,
                    settings,
                    config.capacity.open_loop_check,
                    sweep.first_run_after,
                )
            )
    return plans
