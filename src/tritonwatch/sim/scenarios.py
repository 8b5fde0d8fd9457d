"""Named scenarios: each one puts a model into a condition a collector can measure.

A scenario is a pure function of a model's spec (and of the GPU it sits on) returning a
changed spec, plus the background occupancy it puts on that GPU (work from other
processes). ``SCENARIOS`` is the one table the CLI, the admin endpoint and the
documentation share, so the list of valid names lives in one place.

The changes show in the model's configuration (``GET .../config``) like any other
configuration, so a tuning loop can see and undo them with a load request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tritonwatch.sim.models import GpuSpec, ModelSpec

BUDGET_MS = 50
"""The latency budget the scenarios are drawn against (the design's default p95 SLO)."""


@dataclass(frozen=True)
class ScenarioContext:
    """What a scenario may need beyond the model: its GPU and how many models share it."""

    gpu: GpuSpec | None
    models_on_gpu: int = 1


@dataclass(frozen=True)
class ScenarioEffect:
    """A scenario's result for one model."""

    spec: ModelSpec
    gpu_background: float = 0.0
    """Occupancy of outside work on the model's GPU(s)."""


@dataclass(frozen=True)
class Scenario:
    """A registry entry: the transformation and what it means for a user."""

    name: str
    sets: str
    expect: str
    apply: Callable[[ModelSpec, ScenarioContext], ScenarioEffect]


def _changed(spec: ModelSpec, **changes: Any) -> ModelSpec:
    """A validated copy of ``spec`` with top-level fields replaced (nested dicts merge).

    An ensemble keeps everything but its timing (it has no batcher, instances or GPU
    work of its own: its steps do), and a stateful model keeps its sequence batcher
    (no ``dynamic_batching`` beside it)."""
    if spec.is_ensemble:
        changes = {key: value for key, value in changes.items() if key == "timing"}
    elif spec.sequence_batching is not None:
        changes.pop("dynamic_batching", None)
    data = spec.model_dump()
    for key, value in changes.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) and data[key] else value
    return ModelSpec.model_validate(data)


def healthy(spec: ModelSpec, _: ScenarioContext) -> ScenarioEffect:
    """The model as the model set defines it."""
    return ScenarioEffect(spec)


def queue_delay_too_high(spec: ModelSpec, _: ScenarioContext) -> ScenarioEffect:
    """A batch never fills, so every request waits out an 80 ms queue delay."""
    if spec.max_batch_size == 0:
        return ScenarioEffect(spec)
    return ScenarioEffect(
        _changed(
            spec,
            max_batch_size=max(spec.max_batch_size, 64),
            dynamic_batching={"preferred_batch_size": [], "max_queue_delay_microseconds": 80_000},
        )
    )


def gpu_underused(spec: ModelSpec, _: ScenarioContext) -> ScenarioEffect:
    """One instance of a model that cannot batch and uses 30 % of the GPU: requests queue
    behind it while the GPU idles, and only another instance would help."""
    batching: dict[str, Any] = {}
    if spec.max_batch_size > 0:
        batching = {
            "max_batch_size": 1,
            "dynamic_batching": {"preferred_batch_size": [], "max_queue_delay_microseconds": 0},
        }
    return ScenarioEffect(
        _changed(
            spec,
            instance_group={"count": 1},
            timing={"compute_infer": 40_000.0, "compute_infer_per_item": 0.0},
            gpu_occupancy={"base": 0.3, "per_item": 0.0},
            **batching,
        )
    )


def compute_bound(spec: ModelSpec, _: ScenarioContext) -> ScenarioEffect:
    """Long kernels on a GPU already 85 % busy with other work."""
    batching = (
        {"preferred_batch_size": [], "max_queue_delay_microseconds": 0}
        if spec.max_batch_size > 0
        else None
    )
    return ScenarioEffect(
        _changed(
            spec,
            instance_group={"count": 2},
            dynamic_batching=batching,
            timing={"compute_infer": 45_000.0, "compute_infer_per_item": 2_000.0},
            gpu_occupancy={"base": 0.5, "per_item": 0.02},
        ),
        gpu_background=0.85,
    )


def network_bound(spec: ModelSpec, _: ScenarioContext) -> ScenarioEffect:
    """40 ms added before each response is sent, outside every server-side timer."""
    return ScenarioEffect(_changed(spec, timing={"network_delay": 40_000.0}))


def memory_scarce(spec: ModelSpec, context: ScenarioContext) -> ScenarioEffect:
    """Instances sized so the GPU's memory is 93 % used."""
    gpu = context.gpu
    if gpu is None:
        return ScenarioEffect(spec)
    count = max(2, spec.instance_group.count)
    instances_on_gpu = count * max(1, context.models_on_gpu)
    per_instance = int((0.93 * gpu.memory_total - gpu.memory_base) / instances_on_gpu)
    return ScenarioEffect(
        _changed(spec, instance_group={"count": count}, memory_per_instance=per_instance)
    )


def low_throughput_small_batches(spec: ModelSpec, _: ScenarioContext) -> ScenarioEffect:
    """Dynamic batching off on a model that batches cheaply: every execution is batch 1."""
    return ScenarioEffect(
        _changed(
            spec,
            dynamic_batching=None,
            instance_group={"count": 2},
            timing={"compute_infer": 2_000.0, "compute_infer_per_item": 100.0},
            gpu_occupancy={"base": 0.45, "per_item": 0.01},
        )
    )


KV_PRESSURE_SEQUENCES = 40
KV_PRESSURE_SEQUENCE_TOKENS = 512
"""kv-cache-pressure sizes the pool so this many sequences of this many tokens fill it."""
TTFT_QUEUEING_MAX_SEQS = 4
TTFT_QUEUEING_TOKENS_PER_WORD = 16.0
"""ttft-queueing makes every prompt long: a 32-word canary prompt is 512 tokens."""


def kv_cache_pressure(spec: ModelSpec, _: ScenarioContext) -> ScenarioEffect:
    """An LLM whose KV cache holds about 40 sequences of 512 tokens, while up to 128 may
    run: under concurrent load it fills, preempts the newest, and requests wait."""
    if spec.llm is None:
        return ScenarioEffect(spec)
    blocks = -(-KV_PRESSURE_SEQUENCES * KV_PRESSURE_SEQUENCE_TOKENS // spec.llm.tokens_per_block)
    return ScenarioEffect(_changed(spec, llm={"kv_blocks": blocks, "max_num_seqs": 128}))


def ttft_queueing(spec: ModelSpec, _: ScenarioContext) -> ScenarioEffect:
    """An LLM that runs at most 4 sequences and gets long prompts: extra requests wait
    for a whole generation (TTFT grows with the queue) while the running batch, and so the
    gap between tokens, stays the same."""
    if spec.llm is None:
        return ScenarioEffect(spec)
    return ScenarioEffect(
        _changed(
            spec,
            llm={
                "max_num_seqs": TTFT_QUEUEING_MAX_SEQS,
                "prompt_tokens_per_word": TTFT_QUEUEING_TOKENS_PER_WORD,
            },
        )
    )


SCENARIOS: dict[str, Scenario] = {
    entry.name: entry
    for entry in (
        Scenario(
            "healthy",
            "nothing: the model set as written",
            f"p95 well under {BUDGET_MS} ms, no queue build-up, GPU utilisation in line with load",
            healthy,
        ),
        Scenario(
            "queue-delay-too-high",
            "max_batch_size ≥ 64, dynamic batching without preferred sizes and "
            "max_queue_delay_microseconds 80000",
            f"p95 ≈ 80 ms (over the {BUDGET_MS} ms budget) with queue time the dominant "
            "share of server latency; halving the delay twice brings it back under budget",
            queue_delay_too_high,
        ),
        Scenario(
            "gpu-underused",
            "1 instance, max_batch_size 1 (requests of one row only), 40 ms of compute per "
            "execution occupying 30 % of the GPU",
            "from ~20 req/s or a concurrency burst on: nv_inference_pending_request_count > 0 "
            "and queue time comparable to compute, while nv_gpu_utilization stays ≤ 0.3",
            gpu_underused,
        ),
        Scenario(
            "compute-bound",
            "2 instances, 45 ms + 2 ms per item of compute at 50 % occupancy, and 85 % of the "
            "GPU busy with outside work; queue delay 0",
            f"compute_infer is almost all of server latency, p95 over {BUDGET_MS} ms, "
            "nv_gpu_utilization ≥ 0.85",
            compute_bound,
        ),
        Scenario(
            "network-bound",
            "40 ms added after the server finishes each request, before the response is sent",
            "client end-to-end latency ≈ server latency + 40 ms; Triton's counters and the "
            "statistics API do not see the difference",
            network_bound,
        ),
        Scenario(
            "memory-scarce",
            "at least 2 instances, each sized so GPU memory used is 93 % of total",
            "nv_gpu_memory_used_bytes / nv_gpu_memory_total_bytes ≈ 0.93; one instance fewer "
            "frees a proportional share",
            memory_scarce,
        ),
        Scenario(
            "low-throughput-small-batches",
            "dynamic batching disabled, 2 instances, 2 ms + 0.1 ms per item of compute at "
            "45 % occupancy",
            "Δnv_inference_count / Δnv_inference_exec_count = 1 under concurrent load, "
            f"throughput flat as concurrency grows, p95 far under {BUDGET_MS} ms",
            low_throughput_small_batches,
        ),
        Scenario(
            "kv-cache-pressure",
            "LLM models only: kv_blocks sized so about 40 concurrent 512-token sequences fill "
            "the KV cache, max_num_seqs 128",
            "under a burst of concurrent streams (e.g. 60 prompts of ~390 tokens): KV-cache "
            "usage ≥ 0.95 (vllm:kv_cache_usage_perc, nv_trt_llm_kv_cache_block_metrics "
            "fraction), preemptions > 0 (vllm:num_preemptions_total; TensorRT-LLM shows the "
            "preempted as paused_requests) and waiting requests > 0",
            kv_cache_pressure,
        ),
        Scenario(
            "ttft-queueing",
            "LLM models only: max_num_seqs 4, and long prompts (16 tokens per word: a "
            "32-word prompt is 512 tokens to prefill)",
            "with more concurrent streams than 4, time to first token grows with the waiting "
            "queue (12 concurrent: several times the TTFT of 1) while inter-token latency "
            "stays about flat; vllm:num_requests_waiting / request_type=waiting > 0",
            ttft_queueing,
        ),
    )
}


class UnknownScenarioError(ValueError):
    """A scenario name not in ``SCENARIOS``."""

    def __init__(self, name: str) -> None:
        super().__init__(f"scenario must be one of {sorted(SCENARIOS)}, got: {name!r}")


def get_scenario(name: str) -> Scenario:
    """Looks a scenario up by name.

    Raises:
        UnknownScenarioError: naming the valid choices.
    """
    try:
        return SCENARIOS[name]
    except KeyError:
        raise UnknownScenarioError(name) from None
