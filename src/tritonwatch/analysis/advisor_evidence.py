"""The advisor's input for one model, assembled from the records of one evaluation.

:func:`advisor_input_for` is pure: the config (budgets, protocol), the target's judged
state as the scrape published it (the model's loaded config and Triton's GPUs), the
canary's 5-minute p95 and its samples over the advisor window, the streaming canary's
TTFT/ITL p95 and the SLO statuses go in;
an :class:`~tritonwatch.analysis.advisor_records.AdvisorInput` comes out, before the
window's averages are added
(:func:`~tritonwatch.analysis.advisor_records.with_server_window`,
:func:`~tritonwatch.analysis.advisor_records.with_llm_window`). :class:`LlmWindows` keeps
the LLM readings those averages need between evaluations, and :class:`KvPressureLog`
says when a model's KV cache comes under pressure or leaves it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from tritonwatch.analysis.advisor_records import (
    AdvisorInput,
    AdvisorThresholds,
    LlmSample,
)
from tritonwatch.analysis.advisor_rules import kv_pressure
from tritonwatch.analysis.slo import SLOStatus
from tritonwatch.common.logs import get_logger
from tritonwatch.config.schema import Config, TargetConfig, WatchedModel
from tritonwatch.records.target_state import ModelState, TargetState, model_gpus
from tritonwatch.state.canary_board import SeriesSnapshot
from tritonwatch.state.stream_board import StreamSnapshot

_log = get_logger("advisor")
HOST_CPU = "nv_cpu_utilization"
"""Triton's gauge of the host's CPU use (0–1), among its server-wide numbers."""
TTFT_KIND = "ttft"
ITL_KIND = "itl"
"""The SLO kinds of streams, by their string value (``SLOKind.TTFT``/``ITL``): a status
is matched on the value, so this reads any kind the SLO module names so."""


def advisor_input_for(
    config: Config,
    target: TargetConfig,
    model: WatchedModel,
    state: TargetState,
    *,
    snapshot: SeriesSnapshot | None,
    samples: Sequence[float],
    stream: StreamSnapshot | None = None,
    statuses: Sequence[SLOStatus] = (),
) -> AdvisorInput:
    """What the advisor knows of ``model`` on ``target`` now; None fields where unknown.

    ``stream`` is the streaming canary's series of the model (None when it does not
    stream), ``statuses`` the SLO statuses of the evaluation (any model's)."""
    model_state = state.models.get(model.name)
    p95 = snapshot.window_quantiles.get("5m", {}).get(0.95) if snapshot else None
    cfg = model_state.config if model_state else None
    slo = config.slo_for(model)
    burning = {
        str(s.spec.kind)
        for s in statuses
        if (s.spec.target, s.spec.model) == (target.name, model.name) and s.firing is not None
    }
    protocol = config.canary_for(target, model).protocol
    streaming = stream is not None or protocol == "openai" or _decoupled(model_state)
    judged = slo.judged(streaming)  # a stream's TTFT/ITL SLOs: their defaults where unset
    groups = cfg.instance_groups if cfg else ()
    kinds = {group.kind for group in groups}
    kind = kinds.pop() if len(kinds) == 1 else None
    # A CPU model's instances run on no GPU, whatever GPUs the server has.
    on_gpus = [] if kind == "KIND_CPU" else list(state.gpus.values())
    gpus = model_gpus(on_gpus, (i for g in groups for i in g.gpus)) if on_gpus else []
    return AdvisorInput(
        target=target.name,
        model=model.name,
        latency_budget_seconds=slo.latency.threshold,
        # A stream's whole length is the canary's choice (max_tokens): judged only where
        # the user wrote slo.latency, so no p95-budget advice follows from it otherwise.
        p95_seconds=p95 if judged.latency is not None else None,
        client_mean_seconds=sum(samples) / len(samples) if samples else None,
        max_batch_size=cfg.max_batch_size if cfg else None,
        dynamic_batching=None if cfg is None else cfg.dynamic_batching is not None,
        max_queue_delay_microseconds=(
            cfg.dynamic_batching.max_queue_delay_microseconds
            if cfg and cfg.dynamic_batching
            else None
        ),
        instance_count=sum(g.instances for g in cfg.instance_groups) if cfg else None,
        gpu_utilization=_mean([g.utilization_ratio for g in gpus]),
        gpu_memory_used_bytes=_mean([g.memory_used_bytes for g in gpus]),
        gpu_memory_total_bytes=_mean([g.memory_total_bytes for g in gpus]),
        protocol=protocol,
        streaming=streaming,
        ttft_p95_seconds=_stream_p95(stream, TTFT_KIND),
        itl_p95_seconds=_stream_p95(stream, ITL_KIND),
        ttft_budget_seconds=judged.ttft.threshold if judged.ttft else None,
        itl_budget_seconds=judged.itl.threshold if judged.itl else None,
        ttft_burning=TTFT_KIND in burning,
        itl_burning=ITL_KIND in burning,
        instance_kind=kind,
        host_cpu_utilization=state.server.get(HOST_CPU),
        python_backend=cfg is not None and cfg.traits.python_backend,
    )


def _stream_p95(stream: StreamSnapshot | None, measure: str) -> float | None:
    if stream is None:
        return None
    return stream.window_quantiles.get(measure, {}).get("5m", {}).get(0.95)


def _decoupled(model_state: ModelState | None) -> bool:
    """The loaded config says ``model_transaction_policy { decoupled: true }``."""
    config = model_state.config if model_state else None
    return config is not None and config.traits.decoupled


class LlmWindows:
    """Each model's LLM readings over the advisor window, one per scrape.

    Fed at every evaluation with the model's latest state; a state the scraper has not
    replaced since (the same readings object) is not counted twice, so the window holds
    one sample per scrape whatever the two intervals are. Used from the evaluation job
    only.
    """

    def __init__(self) -> None:
        self._windows: dict[tuple[str, str], deque[tuple[float, LlmSample]]] = {}

    def observe(
        self, key: tuple[str, str], model_state: ModelState | None, now: float, span: float
    ) -> list[LlmSample]:
        """Adds the state's readings (if new) and returns the window, oldest first."""
        window = self._windows.setdefault(key, deque())
        readings = model_state.llm_readings if model_state else None
        if model_state and readings and (not window or window[-1][1][0] is not readings):
            window.append((now, (readings, model_state.llm)))
        while window and window[0][0] < now - span:
            window.popleft()
        return [sample for _, sample in window]


class KvPressureLog:
    """Logs ``kv_cache_pressure_changed`` when a model's KV-cache pressure verdict turns
    (:func:`~tritonwatch.analysis.advisor_rules.kv_pressure`): once when it starts, once
    when it ends, with the numbers, not at every evaluation."""

    def __init__(self) -> None:
        self._under: set[tuple[str, str]] = set()

    def update(self, model: AdvisorInput, limits: AdvisorThresholds) -> bool:
        """Records this evaluation's verdict; True when it changed."""
        key = (model.target, model.model)
        pressure = kv_pressure(model, limits)
        if pressure == (key in self._under):
            return False
        if pressure:
            self._under.add(key)
        else:
            self._under.discard(key)
        _log.info(
            "kv_cache_pressure_changed",
            target=model.target,
            model=model.model,
            pressure=pressure,
            kv_cache_usage_ratio=model.kv_cache_usage_ratio,
            preemptions_per_second=model.preemptions_per_second,
            requests_waiting=model.requests_waiting,
            paused_requests=model.paused_requests,
        )
        return True


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None
