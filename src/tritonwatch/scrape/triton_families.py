"""The ``nv_*`` families Triton prints on ``/metrics``, in one table.

The parser (:mod:`tritonwatch.scrape.triton_text`), the rate computations and the
simulator share this table instead of repeating family names. Names, types and HELP
texts come from Triton core's ``src/metrics.cc``, its metrics guide and the real
scrapes in ``tests/fixtures/triton_metrics``; the ``since`` notes say which servers
print a family, so a missing family on an old server is expected, not an error.

Scope says which labels key a family's series: per model (``model``, ``version``,
optionally split by ``gpu_uuid``), per GPU (``gpu_uuid``) or server-wide (no labels).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    """The Prometheus type Triton declares in ``# TYPE``."""

    COUNTER = "counter"
    GAUGE = "gauge"
    SUMMARY = "summary"
    HISTOGRAM = "histogram"


class Scope(StrEnum):
    """Which labels identify one series of the family."""

    MODEL = "model"
    GPU = "gpu"
    SERVER = "server"


@dataclass(frozen=True, slots=True)
class TritonFamily:
    """One metric family as Triton prints it."""

    name: str
    kind: Kind
    scope: Scope
    help: str
    since: str = ""


_EXCLUDES = "(does not include cached requests)"
_INCLUDES = "(includes cached requests)"

# Per-model counters (Triton updates them only after a successful response completes).
REQUEST_SUCCESS = "nv_inference_request_success"
REQUEST_FAILURE = "nv_inference_request_failure"
INFERENCE_COUNT = "nv_inference_count"
EXEC_COUNT = "nv_inference_exec_count"
REQUEST_DURATION_US = "nv_inference_request_duration_us"
QUEUE_DURATION_US = "nv_inference_queue_duration_us"
COMPUTE_INPUT_DURATION_US = "nv_inference_compute_input_duration_us"
COMPUTE_INFER_DURATION_US = "nv_inference_compute_infer_duration_us"
COMPUTE_OUTPUT_DURATION_US = "nv_inference_compute_output_duration_us"
CACHE_HITS = "nv_cache_num_hits_per_model"
CACHE_MISSES = "nv_cache_num_misses_per_model"
CACHE_HIT_DURATION_US = "nv_cache_hit_duration_per_model"
CACHE_MISS_DURATION_US = "nv_cache_miss_duration_per_model"
# Per-model gauges.
PENDING_REQUESTS = "nv_inference_pending_request_count"
MODEL_LOAD_SECONDS = "nv_model_load_duration_secs"
# Per-model summaries (``--metrics-config summary_latencies=true``).
REQUEST_SUMMARY_US = "nv_inference_request_summary_us"
QUEUE_SUMMARY_US = "nv_inference_queue_summary_us"
COMPUTE_INPUT_SUMMARY_US = "nv_inference_compute_input_summary_us"
COMPUTE_INFER_SUMMARY_US = "nv_inference_compute_infer_summary_us"
COMPUTE_OUTPUT_SUMMARY_US = "nv_inference_compute_output_summary_us"
FIRST_RESPONSE_HISTOGRAM_MS = "nv_inference_first_response_histogram_ms"
# Per-GPU (from DCGM; absent on MIG GPUs and CPU-only servers).
GPU_UTILIZATION = "nv_gpu_utilization"
GPU_MEMORY_TOTAL_BYTES = "nv_gpu_memory_total_bytes"
GPU_MEMORY_USED_BYTES = "nv_gpu_memory_used_bytes"
GPU_POWER_USAGE_WATTS = "nv_gpu_power_usage"
GPU_POWER_LIMIT_WATTS = "nv_gpu_power_limit"
GPU_ENERGY_JOULES = "nv_energy_consumption"

FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
"""The ``reason`` values of ``nv_inference_request_failure`` (Triton 24.07 and later)."""

UNKNOWN_FAILURE_REASON = "unknown"
"""Our reason for failures counted by servers older than 24.07, which print no
``reason`` label. Deliberately not ``OTHER``: that is a real Triton reason with its
own meaning, and guessing it would mislead rules that read reasons."""

STAGE_DURATION_FAMILIES: dict[str, str] = {
    "request": REQUEST_DURATION_US,
    "queue": QUEUE_DURATION_US,
    "compute_input": COMPUTE_INPUT_DURATION_US,
    "compute_infer": COMPUTE_INFER_DURATION_US,
    "compute_output": COMPUTE_OUTPUT_DURATION_US,
}
"""Latency stage → its cumulative microsecond counter."""

STAGE_SUMMARY_FAMILIES: dict[str, str] = {
    "request": REQUEST_SUMMARY_US,
    "queue": QUEUE_SUMMARY_US,
    "compute_input": COMPUTE_INPUT_SUMMARY_US,
    "compute_infer": COMPUTE_INFER_SUMMARY_US,
    "compute_output": COMPUTE_OUTPUT_SUMMARY_US,
}
"""Latency stage → its summary family (quantiles over Triton's 60 s window)."""


def _model(name: str, kind: Kind, help_text: str, since: str = "") -> TritonFamily:
    return TritonFamily(name, kind, Scope.MODEL, help_text, since)


def _gpu(name: str, kind: Kind, help_text: str) -> TritonFamily:
    return TritonFamily(name, kind, Scope.GPU, help_text, "GPU servers, not MIG")


def _server(name: str, help_text: str, since: str = "") -> TritonFamily:
    return TritonFamily(name, Kind.GAUGE, Scope.SERVER, help_text, since)


_C, _G = Kind.COUNTER, Kind.GAUGE
_OLD_CACHE = "22.x to 23.02 (old response cache)"

FAMILIES: tuple[TritonFamily, ...] = (
    _model(REQUEST_SUCCESS, _C, "Number of successful inference requests, all batch sizes"),
    _model(
        REQUEST_FAILURE,
        _C,
        "Number of failed inference requests, all batch sizes",
        "reason label since 24.07",
    ),
    _model(INFERENCE_COUNT, _C, f"Number of inferences performed {_EXCLUDES}"),
    _model(EXEC_COUNT, _C, f"Number of model executions performed {_EXCLUDES}"),
    _model(
        REQUEST_DURATION_US,
        _C,
        f"Cumulative inference request duration in microseconds {_INCLUDES}",
    ),
    _model(
        QUEUE_DURATION_US, _C, f"Cumulative inference queuing duration in microseconds {_INCLUDES}"
    ),
    _model(
        COMPUTE_INPUT_DURATION_US,
        _C,
        f"Cumulative compute input duration in microseconds {_EXCLUDES}",
    ),
    _model(
        COMPUTE_INFER_DURATION_US,
        _C,
        f"Cumulative compute inference duration in microseconds {_EXCLUDES}",
    ),
    _model(
        COMPUTE_OUTPUT_DURATION_US,
        _C,
        f"Cumulative inference compute output duration in microseconds {_EXCLUDES}",
    ),
    _model(CACHE_HITS, _C, "Number of cache hits per model"),
    _model(CACHE_MISSES, _C, "Number of cache misses per model"),
    _model(
        CACHE_HIT_DURATION_US,
        _C,
        "Total cache hit duration per model, in microseconds",
        "23.03",
    ),
    _model(
        CACHE_MISS_DURATION_US,
        _C,
        "Total cache miss (insert+lookup) duration per model, in microseconds",
        "23.03",
    ),
    _model(
        "nv_cache_hit_lookup_duration_per_model",
        _C,
        "Total cache hit lookup duration per model, in microseconds",
        _OLD_CACHE,
    ),
    _model(
        "nv_cache_miss_lookup_duration_per_model",
        _C,
        "Total cache miss lookup duration per model, in microseconds",
        _OLD_CACHE,
    ),
    _model(
        "nv_cache_miss_insertion_duration_per_model",
        _C,
        "Total cache miss insertion duration per model, in microseconds",
        _OLD_CACHE,
    ),
    _model(
        PENDING_REQUESTS,
        _G,
        "Instantaneous number of pending requests awaiting execution per-model.",
        "23.09",
    ),
    _model(MODEL_LOAD_SECONDS, _G, "Model load time in seconds", "24.11"),
    _model(
        REQUEST_SUMMARY_US,
        Kind.SUMMARY,
        f"Summary of inference request duration in microseconds {_INCLUDES}",
        "23.04",
    ),
    _model(
        QUEUE_SUMMARY_US,
        Kind.SUMMARY,
        f"Summary of inference queuing duration in microseconds {_INCLUDES}",
        "23.04",
    ),
    _model(
        COMPUTE_INPUT_SUMMARY_US,
        Kind.SUMMARY,
        f"Cumulative compute input duration in microseconds {_EXCLUDES}",
        "23.04",
    ),
    _model(
        COMPUTE_INFER_SUMMARY_US,
        Kind.SUMMARY,
        f"Cumulative compute inference duration in microseconds {_EXCLUDES}",
        "23.04",
    ),
    _model(
        COMPUTE_OUTPUT_SUMMARY_US,
        Kind.SUMMARY,
        f"Cumulative inference compute output duration in microseconds {_EXCLUDES}",
        "23.04",
    ),
    _model(
        FIRST_RESPONSE_HISTOGRAM_MS,
        Kind.HISTOGRAM,
        "Duration from request to first response in milliseconds",
        "histogram_latencies=true, decoupled models",
    ),
    _gpu(GPU_UTILIZATION, _G, "GPU utilization rate [0.0 - 1.0)"),
    _gpu(GPU_MEMORY_TOTAL_BYTES, _G, "GPU total memory, in bytes"),
    _gpu(GPU_MEMORY_USED_BYTES, _G, "GPU used memory, in bytes"),
    _gpu(GPU_POWER_USAGE_WATTS, _G, "GPU power usage in watts"),
    _gpu(GPU_POWER_LIMIT_WATTS, _G, "GPU power management limit in watts"),
    _gpu(GPU_ENERGY_JOULES, _C, "GPU energy consumption in joules since the Triton Server started"),
    _server("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", "22.09"),
    _server("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", "22.09"),
    _server("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", "22.09"),
    _server(
        "nv_pinned_memory_pool_total_bytes",
        "Pinned memory pool total memory size, in bytes",
        "24.01",
    ),
    _server(
        "nv_pinned_memory_pool_used_bytes", "Pinned memory pool used memory size, in bytes", "24.01"
    ),
    _server("nv_cache_num_entries", "Number of responses stored in response cache", _OLD_CACHE),
    _server("nv_cache_num_lookups", "Number of cache lookups in response cache", _OLD_CACHE),
    _server("nv_cache_num_hits", "Number of cache hits in response cache", _OLD_CACHE),
    _server("nv_cache_num_misses", "Number of cache misses in response cache", _OLD_CACHE),
    _server("nv_cache_num_evictions", "Number of cache evictions in response cache", _OLD_CACHE),
    _server(
        "nv_cache_lookup_duration",
        "Total cache lookup duration (hit and miss), in microseconds",
        _OLD_CACHE,
    ),
    _server(
        "nv_cache_insertion_duration", "Total cache insertion duration, in microseconds", _OLD_CACHE
    ),
    _server("nv_cache_util", "Cache utilization [0.0 - 1.0]", _OLD_CACHE),
)

FAMILIES_BY_NAME: dict[str, TritonFamily] = {family.name: family for family in FAMILIES}
