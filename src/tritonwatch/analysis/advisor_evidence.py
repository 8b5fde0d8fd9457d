"""The advisor's input for one model, assembled from the records of one evaluation.

Pure: the config (budget, protocol), the model's scraped state (its loaded config and
Triton's GPUs), the canary's 5-minute p95 and its samples over the advisor window go in;
an :class:`~tritonwatch.analysis.advisor_records.AdvisorInput` comes out, before the
server window's averages are added
(:func:`~tritonwatch.analysis.advisor_records.with_server_window`).
"""

from __future__ import annotations

from collections.abc import Sequence

from tritonwatch.analysis.advisor_records import AdvisorInput
from tritonwatch.canary_series import SeriesSnapshot
from tritonwatch.config.schema import Config, TargetConfig, WatchedModel
from tritonwatch.target_state import TargetState, model_gpus


def advisor_input_for(
    config: Config,
    target: TargetConfig,
    model: WatchedModel,
    state: TargetState,
    *,
    snapshot: SeriesSnapshot | None,
    samples: Sequence[float],
) -> AdvisorInput:
    """What the advisor knows of ``model`` on ``target`` now; None fields where unknown."""
    model_state = state.models.get(model.name)
    p95 = snapshot.window_quantiles.get("5m", {}).get(0.95) if snapshot else None
    cfg = model_state.config if model_state else None
    groups = cfg.instance_groups if cfg else ()
    gpus = model_gpus(list(state.gpus.values()), (i for g in groups for i in g.gpus))
    return AdvisorInput(
        target=target.name,
        model=model.name,
        latency_budget_seconds=config.slo_for(model).latency.threshold,
        p95_seconds=p95,
        client_mean_seconds=sum(samples) / len(samples) if samples else None,
        max_batch_size=cfg.max_batch_size if cfg else None,
        dynamic_batching=None if cfg is None else cfg.dynamic_batching is not None,
        max_queue_delay_microseconds=(
            cfg.dynamic_batching.max_queue_delay_microseconds
            if cfg and cfg.dynamic_batching else None
        ),
        instance_count=sum(g.instances for g in cfg.instance_groups) if cfg else None,
        gpu_utilization=_mean([g.utilization_ratio for g in gpus]),
        gpu_memory_used_bytes=_mean([g.memory_used_bytes for g in gpus]),
        gpu_memory_total_bytes=_mean([g.memory_total_bytes for g in gpus]),
        protocol=config.canary_for(target, model).protocol,
    )  # fmt: skip


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None
