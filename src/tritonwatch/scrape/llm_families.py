"""The LLM serving families a ``/metrics`` page may carry, in one table.

Beside :mod:`tritonwatch.scrape.triton_families`: the TensorRT-LLM backend's gauges on
Triton's page (``nv_trt_llm_*``, labels ``model``, ``version`` and one split label),
its token-length histograms (``nv_llm_*_token_len``), and vLLM's ``vllm:*`` families,
both on vLLM's own server (labels ``model_name`` and, since V1, ``engine``) and on
Triton's page through the vLLM backend (labels ``model``, ``version``). Names, types and
split labels come from tensorrtllm_backend's ``custom_metrics_reporter.cc`` @v0.14.0 to
v0.19.0, vLLM's ``vllm/v1/metrics/loggers.py`` and the fixtures in
``tests/fixtures/llm_metrics`` (docs/plans/issue18.md A5).

``aggregate`` says how series of one model that differ in any other label (vLLM's
``engine``: one series per data-parallel engine core) fold into one number: counts and
tokens add up, a usage ratio does not (two engines at 0.9 are not at 1.8), so its
maximum is kept, the fullest engine being the one that preempts first. Which of these
names a page prints decides what is read (:mod:`tritonwatch.scrape.llm_readings`),
never a version number.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tritonwatch.records.llm_records import LlmBackend
from tritonwatch.scrape.triton_families import Kind, Scope


class Aggregate(StrEnum):
    """How the series of one model and split value fold into one value."""

    SUM = "sum"
    MAX = "max"


@dataclass(frozen=True, slots=True)
class LlmFamily:
    """One LLM family as its server prints it; ``split_label`` names the label whose
    value tells its series apart (TensorRT-LLM's ``request_type`` …), None for vLLM."""

    name: str
    kind: Kind
    backend: LlmBackend
    split_label: str | None
    help: str
    since: str = ""
    aggregate: Aggregate = Aggregate.SUM

    @property
    def scope(self) -> Scope:
        """Every LLM family is per model."""
        return Scope.MODEL


# TensorRT-LLM backend, gauges split by one label (custom_metrics_reporter.cc).
TRT_REQUESTS = "nv_trt_llm_request_metrics"
TRT_KV_BLOCKS = "nv_trt_llm_kv_cache_block_metrics"
TRT_INFLIGHT_BATCHER = "nv_trt_llm_inflight_batcher_metrics"
TRT_V1 = "nv_trt_llm_v1_metrics"
TRT_RUNTIME_MEMORY = "nv_trt_llm_runtime_memory_metrics"
TRT_GENERAL = "nv_trt_llm_general_metrics"
TRT_DISAGGREGATED = "nv_trt_llm_disaggregated_serving_metrics"
TRT_OUTPUT_TOKENS = "nv_llm_output_token_len"
TRT_INPUT_TOKENS = "nv_llm_input_token_len"
# vLLM (the server's page and the Triton backend's).
VLLM_RUNNING = "vllm:num_requests_running"
VLLM_WAITING = "vllm:num_requests_waiting"
VLLM_KV_USAGE = "vllm:kv_cache_usage_perc"
VLLM_GPU_CACHE_USAGE = "vllm:gpu_cache_usage_perc"
VLLM_PREEMPTIONS = "vllm:num_preemptions_total"
VLLM_PROMPT_TOKENS = "vllm:prompt_tokens_total"
VLLM_GENERATION_TOKENS = "vllm:generation_tokens_total"
VLLM_TTFT = "vllm:time_to_first_token_seconds"
VLLM_TPOT = "vllm:time_per_output_token_seconds"
VLLM_ITL = "vllm:inter_token_latency_seconds"
VLLM_E2E = "vllm:e2e_request_latency_seconds"
VLLM_REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"
VLLM_REQUEST_GENERATION_TOKENS = "vllm:request_generation_tokens"
VLLM_REQUEST_PARAMS_N = "vllm:request_params_n"

_TRT: LlmBackend = "tensorrt_llm"
_VLLM: LlmBackend = "vllm"
_G, _C, _H = Kind.GAUGE, Kind.COUNTER, Kind.HISTOGRAM
_V1_SERVER = "vLLM server (model_name, engine labels since V1)"

LLM_FAMILIES: tuple[LlmFamily, ...] = (
    LlmFamily(
        TRT_REQUESTS,
        _G,
        _TRT,
        "request_type",
        "TRT LLM request metrics (active, max, scheduled, context; waiting since v0.18.0)",
    ),
    LlmFamily(
        TRT_KV_BLOCKS,
        _G,
        _TRT,
        "kv_cache_block_type",
        "TRT LLM KV cache block metrics (max, free, used, tokens_per, reused; fraction "
        "since v0.18.0)",
    ),
    LlmFamily(
        TRT_INFLIGHT_BATCHER,
        _G,
        _TRT,
        "inflight_batcher_specific_metric",
        "TRT LLM inflight_batcher-specific metrics",
    ),
    LlmFamily(TRT_V1, _G, _TRT, "v1_specific_metric", "TRT LLM v1-specific metrics"),
    LlmFamily(TRT_RUNTIME_MEMORY, _G, _TRT, "memory_type", "TRT LLM runtime memory metrics"),
    LlmFamily(TRT_GENERAL, _G, _TRT, "general_type", "General TRT LLM metrics"),
    LlmFamily(
        TRT_DISAGGREGATED,
        _C,
        _TRT,
        "disaggregated_serving_type",
        "TRT LLM disaggregated serving metrics",
        "v0.16.0",
    ),
    LlmFamily(TRT_OUTPUT_TOKENS, _H, _TRT, None, "TRT LLM response metrics", "v0.16.0"),
    LlmFamily(TRT_INPUT_TOKENS, _H, _TRT, None, "TRT LLM response metrics", "v0.16.0"),
    LlmFamily(
        VLLM_RUNNING, _G, _VLLM, None, "Number of requests in model execution batches.", _V1_SERVER
    ),
    LlmFamily(
        VLLM_WAITING, _G, _VLLM, None, "Number of requests waiting to be processed.", _V1_SERVER
    ),
    LlmFamily(
        VLLM_KV_USAGE,
        _G,
        _VLLM,
        None,
        "KV-cache usage. 1 means 100 percent usage.",
        "vLLM 0.9 (renamed from gpu_cache_usage_perc)",
        Aggregate.MAX,
    ),
    LlmFamily(
        VLLM_GPU_CACHE_USAGE,
        _G,
        _VLLM,
        None,
        "GPU KV-cache usage. 1 means 100 percent usage.",
        "deprecated in vLLM 0.9, then hidden",
        Aggregate.MAX,
    ),
    LlmFamily(
        VLLM_PREEMPTIONS, _C, _VLLM, None, "Cumulative number of preemption from the engine."
    ),
    LlmFamily(
        VLLM_PROMPT_TOKENS,
        _C,
        _VLLM,
        None,
        "Number of prefill tokens processed.",
        "server; Triton backend 24.08+",
    ),
    LlmFamily(
        VLLM_GENERATION_TOKENS,
        _C,
        _VLLM,
        None,
        "Number of generation tokens processed.",
        "server; Triton backend 24.08+",
    ),
    LlmFamily(VLLM_TTFT, _H, _VLLM, None, "Histogram of time to first token in seconds."),
    LlmFamily(
        VLLM_TPOT,
        _H,
        _VLLM,
        None,
        "Histogram of time per output token in seconds.",
        "deprecated in vLLM 0.11 (renamed inter_token_latency_seconds)",
    ),
    LlmFamily(
        VLLM_ITL, _H, _VLLM, None, "Histogram of inter-token latency in seconds.", "vLLM 0.11"
    ),
    LlmFamily(VLLM_E2E, _H, _VLLM, None, "Histogram of e2e request latency in seconds."),
    LlmFamily(VLLM_REQUEST_PROMPT_TOKENS, _H, _VLLM, None, "Number of prefill tokens processed."),
    LlmFamily(
        VLLM_REQUEST_GENERATION_TOKENS, _H, _VLLM, None, "Number of generation tokens processed."
    ),
    LlmFamily(VLLM_REQUEST_PARAMS_N, _H, _VLLM, None, "Histogram of the n request parameter."),
)

LLM_FAMILIES_BY_NAME: dict[str, LlmFamily] = {family.name: family for family in LLM_FAMILIES}
