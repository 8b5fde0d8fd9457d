"""Hand-made pipelines for the unit tests: windows, configs and target states with known
numbers (the ensemble of the issue: prep 3.4 ms → core 25.4 ms, 20.1 of it queue → post
1.5 ms; the BLS model that calls core twice)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from tritonwatch.records.observations import (
    CacheRates,
    DynamicBatching,
    InstanceGroup,
    ModelConfigSnapshot,
    ModelRates,
)
from tritonwatch.records.target_state import ModelState, TargetState

MS = 1e-3


def rates(
    model: str,
    request_ms: float,
    *,
    rps: float = 20.0,
    queue: float = 0.0,
    compute_input: float = 0.0,
    compute_infer: float = 0.0,
    compute_output: float = 0.0,
    executions: float | None = None,
    interval: float = 10.0,
    cache: CacheRates | None = None,
) -> ModelRates:
    """A window of ``model`` whose per-request averages are these milliseconds."""
    return ModelRates(
        model=model,
        version="",
        interval_seconds=interval,
        counters_reset=False,
        requests_per_second=rps,
        inferences_per_second=rps,
        executions_per_second=rps if executions is None else executions,
        failures_per_second=0.0,
        failures_per_second_by_reason=MappingProxyType({}),
        batch_size_average=1.0,
        request_seconds_average=request_ms * MS,
        queue_seconds_average=queue * MS,
        compute_input_seconds_average=compute_input * MS,
        compute_infer_seconds_average=compute_infer * MS,
        compute_output_seconds_average=compute_output * MS,
        pending_requests=0.0,
        cache=cache,
    )


def ensemble_config(name: str, steps: Sequence[str]) -> dict[str, Any]:
    """An ensemble's config as Triton prints it (the parts that matter here)."""
    return {
        "name": name,
        "platform": "ensemble",
        "backend": "",
        "max_batch_size": 8,
        "ensemble_scheduling": {
            "step": [{"model_name": step, "model_version": -1} for step in steps]
        },
        "instance_group": [],
    }


def python_config(
    name: str, *, delay_us: int | None = None, decoupled: bool = False
) -> dict[str, Any]:
    """A Python-backend model's config, with a dynamic batcher when ``delay_us`` is set."""
    config: dict[str, Any] = {
        "name": name,
        "platform": "",
        "backend": "python",
        "max_batch_size": 8,
        "instance_group": [{"name": name, "kind": "KIND_CPU", "count": 1, "gpus": []}],
        "model_transaction_policy": {"decoupled": decoupled},
    }
    if delay_us is not None:
        config["dynamic_batching"] = {
            "preferred_batch_size": [8],
            "max_queue_delay_microseconds": delay_us,
        }
    return config


def snapshot(raw: Mapping[str, Any]) -> ModelConfigSnapshot:
    """The typed snapshot of ``raw`` (as the scraper's parser makes it)."""
    batcher = raw.get("dynamic_batching")
    groups = tuple(
        InstanceGroup(g["name"], g["kind"], g["count"], tuple(g["gpus"]))
        for g in raw.get("instance_group", [])
    )
    return ModelConfigSnapshot(
        model=raw["name"],
        at=0.0,
        max_batch_size=raw.get("max_batch_size", 0),
        dynamic_batching=(
            DynamicBatching(
                tuple(batcher["preferred_batch_size"]), batcher["max_queue_delay_microseconds"]
            )
            if batcher
            else None
        ),
        instance_groups=groups,
        raw=MappingProxyType(dict(raw)),
    )


def state(
    watched: Mapping[str, ModelState], composing: Mapping[str, ModelState] | None = None
) -> TargetState:
    return TargetState("t", {}, 0, dict(watched), {}, {}, {}, dict(composing or {}))


def issue_ensemble(*, canary_rps: float | None = None) -> TargetState:
    """The issue's ``pipeline``: 31 ms per request, of which core's queue is 20.1 ms."""
    pipeline = ModelState(
        "pipeline",
        rates=rates("pipeline", 31.0, compute_infer=9.6, compute_input=0.15, compute_output=0.25),
        config=snapshot(ensemble_config("pipeline", ["prep", "core", "post"])),
    )
    composing = {
        "prep": ModelState(
            "prep",
            rates=rates(
                "prep", 3.4, queue=0.05, compute_input=0.05, compute_infer=3.2, compute_output=0.1
            ),
            config=snapshot(python_config("prep")),
        ),
        "core": ModelState(
            "core",
            rates=rates(
                "core", 25.4, queue=20.1, compute_input=0.05, compute_infer=5.15, compute_output=0.1
            ),
            config=snapshot(python_config("core", delay_us=20_000)),
        ),
        "post": ModelState(
            "post",
            rates=rates("post", 1.5, compute_input=0.05, compute_infer=1.3, compute_output=0.1),
            config=snapshot(python_config("post")),
        ),
    }
    if canary_rps is not None:
        pipeline = ModelState(
            pipeline.model,
            pipeline.rates,
            config=pipeline.config,
            canary_requests_per_second=canary_rps,
        )
    return state({"pipeline": pipeline}, composing)


def issue_bls(*, core_rps: float = 40.0, bls_rps: float = 20.0) -> TargetState:
    """The issue's ``bls``: 1 ms of its own Python, then two calls of core (25 ms each)."""
    bls = ModelState(
        "bls",
        rates=rates(
            "bls", 52.0, rps=bls_rps, compute_infer=51.6, compute_input=0.1, compute_output=0.1
        ),
        config=snapshot(python_config("bls")),
        composing_models=("core",),
    )
    core = ModelState(
        "core",
        rates=rates("core", 25.0, rps=core_rps, queue=20.0, compute_infer=5.0),
        config=snapshot(python_config("core", delay_us=20_000)),
    )
    return state({"bls": bls}, {"core": core})
