"""The LLM families on the simulator's ``/metrics``, per LLM model and its backend.

* TensorRT-LLM (``llm.backend: tensorrt_llm``): the backend's gauges as its
  ``custom_metrics_reporter.cc`` (v0.18) prints them on Triton's page, labels ``model``,
  ``version`` and one split label (``request_type`` with ``waiting``,
  ``kv_cache_block_type`` with ``fraction``, …), labels sorted as prometheus-cpp prints
  them. TensorRT-LLM has no preemption counter: preempted sequences waiting to resume
  show as ``paused_requests``.
* vLLM (``llm.backend: vllm``): the vLLM OpenAI server's V1 families
  (``vllm/v1/metrics/loggers.py``), labels ``model_name`` and ``engine="0"`` in that
  order, counters exposed with prometheus_client's ``_total`` suffix, values printed as
  Python floats (``8.0``).
* ``nv_inference_first_response_histogram_ms`` (Triton 24.11+) for every decoupled model
  when ``histogram_latencies`` is on, with Triton's default buckets.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from tritonwatch.sim.llm_counters import Histogram, LlmCounters
from tritonwatch.sim.llm_engine import LlmEngine
from tritonwatch.sim.repository import ModelSlot

Labels = tuple[tuple[str, str], ...]


class Exposition(Protocol):
    """What ``metrics._Exposition`` offers (kept structural to avoid an import cycle)."""

    def family(self, name: str, kind: str, help_text: str) -> None: ...

    def sample(
        self,
        name: str,
        labels: Iterable[tuple[str, str]],
        value: float,
        formatter: Callable[[float], str] | None = None,
    ) -> None: ...


def python_float(value: float) -> str:
    """A value as prometheus_client prints it (``8.0``, ``0.97``, ``+Inf``)."""
    if value == float("inf"):
        return "+Inf"
    return repr(float(value))


LlmRow = tuple[ModelSlot, LlmEngine]


def _paused(engine: LlmEngine) -> int:
    return sum(1 for sequence in engine.waiting if sequence.admitted_at is not None)


def _requests(row: LlmRow) -> list[tuple[str, float]]:
    _, engine = row
    return [
        ("active", len(engine.running)),
        ("context", engine.last_step_context_requests),
        ("max", engine.spec.max_num_seqs),
        ("scheduled", len(engine.running)),
        ("waiting", len(engine.waiting)),
    ]


def _memory(row: LlmRow) -> list[tuple[str, float]]:
    slot, _ = row
    return [("cpu", 0), ("gpu", slot.spec.memory_per_instance), ("pinned", 0)]


def _kv_blocks(row: LlmRow) -> list[tuple[str, float]]:
    _, engine = row
    return [
        ("fraction", engine.kv_usage),
        ("free", engine.kv_blocks_free),
        ("max", engine.spec.kv_blocks),
        ("reused", 0),
        ("tokens_per", engine.spec.tokens_per_block),
        ("used", engine.kv_blocks_used),
    ]


def _inflight(row: LlmRow) -> list[tuple[str, float]]:
    _, engine = row
    return [
        ("generation_requests", max(0, len(engine.running) - engine.last_step_context_requests)),
        ("micro_batch_id", 0),
        ("paused_requests", _paused(engine)),
        ("total_context_tokens", engine.last_step_context_tokens),
    ]


def _general(row: LlmRow) -> list[tuple[str, float]]:
    _, engine = row
    return [
        ("iteration_counter", engine.counters.steps),
        ("timestamp", int(time.time())),
    ]


_TRTLLM_FAMILIES = (
    ("nv_trt_llm_request_metrics", "request_type", "TRT LLM request metrics", _requests),
    (
        "nv_trt_llm_runtime_memory_metrics",
        "memory_type",
        "TRT LLM runtime memory metrics",
        _memory,
    ),
    (
        "nv_trt_llm_kv_cache_block_metrics",
        "kv_cache_block_type",
        "TRT LLM KV cache block metrics",
        _kv_blocks,
    ),
    (
        "nv_trt_llm_inflight_batcher_metrics",
        "inflight_batcher_specific_metric",
        "TRT LLM inflight_batcher-specific metrics",
        _inflight,
    ),
    ("nv_trt_llm_general_metrics", "general_type", "General TRT LLM metrics", _general),
)


def render_trtllm(out: Exposition, rows: Sequence[LlmRow]) -> None:
    """The TensorRT-LLM backend's gauges for the given models."""
    if not rows:
        return
    for name, split, help_text, read in _TRTLLM_FAMILIES:
        out.family(name, "gauge", help_text)
        for row in rows:
            slot = row[0]
            for value_name, value in read(row):
                labels = sorted(
                    (
                        (split, value_name),
                        ("model", slot.spec.name),
                        ("version", slot.spec.version_label),
                    )
                )
                out.sample(name, labels, value)


_VLLM_GAUGES: tuple[tuple[str, str, Callable[[LlmEngine], float]], ...] = (
    (
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        lambda engine: len(engine.running),
    ),
    (
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        lambda engine: len(engine.waiting),
    ),
    (
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        lambda engine: engine.kv_usage,
    ),
)
_VLLM_COUNTERS: tuple[tuple[str, str, Callable[[LlmCounters], float]], ...] = (
    (
        "vllm:num_preemptions_total",
        "Cumulative number of preemption from the engine.",
        lambda counters: counters.preemptions,
    ),
    (
        "vllm:prompt_tokens_total",
        "Number of prefill tokens processed.",
        lambda counters: counters.prompt_tokens,
    ),
    (
        "vllm:generation_tokens_total",
        "Number of generation tokens processed.",
        lambda counters: counters.generation_tokens,
    ),
)
_VLLM_HISTOGRAMS: tuple[tuple[str, str, Callable[[LlmCounters], Histogram]], ...] = (
    (
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        lambda counters: counters.ttft_s,
    ),
    (
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        lambda counters: counters.itl_s,
    ),
    (
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        lambda counters: counters.e2e_s,
    ),
)


def render_vllm(out: Exposition, rows: Sequence[LlmRow]) -> None:
    """The vLLM server's V1 families for the given models."""
    if not rows:
        return

    def labels(row: LlmRow) -> Labels:
        return (("model_name", row[0].spec.name), ("engine", "0"))

    for name, help_text, gauge in _VLLM_GAUGES:
        out.family(name, "gauge", help_text)
        for row in rows:
            out.sample(name, labels(row), gauge(row[1]), python_float)
    for name, help_text, counter in _VLLM_COUNTERS:
        out.family(name, "counter", help_text)
        for row in rows:
            out.sample(name, labels(row), counter(row[1].counters), python_float)
    for name, help_text, histogram in _VLLM_HISTOGRAMS:
        out.family(name, "histogram", help_text)
        for row in rows:
            _histogram(out, name, labels(row), histogram(row[1].counters), python_float)


FIRST_RESPONSE = "nv_inference_first_response_histogram_ms"


def render_first_response(out: Exposition, rows: Sequence[LlmRow]) -> None:
    """Triton's first-response histogram (ms) of the decoupled models."""
    if not rows:
        return
    out.family(
        FIRST_RESPONSE, "histogram", "Duration from request to first response in milliseconds"
    )
    for slot, engine in rows:
        labels = (("model", slot.spec.name), ("version", slot.spec.version_label))
        _histogram(out, FIRST_RESPONSE, labels, engine.counters.first_response_ms, None)


def _histogram(
    out: Exposition,
    name: str,
    labels: Labels,
    histogram: Histogram,
    formatter: Callable[[float], str] | None,
) -> None:
    out.sample(f"{name}_count", labels, histogram.count, formatter)
    out.sample(f"{name}_sum", labels, histogram.total, formatter)
    for bound, count in histogram.cumulative():
        le = (
            "+Inf"
            if bound == float("inf")
            else (python_float(bound) if formatter is not None else f"{bound:g}")
        )
        out.sample(f"{name}_bucket", (*labels, ("le", le)), count, formatter)
