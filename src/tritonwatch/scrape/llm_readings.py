"""One model's LLM numbers from a parsed page, read by which names the page printed.

Servers differ by backend and release: TensorRT-LLM added ``request_type="waiting"`` and
``kv_cache_block_type="fraction"`` in v0.18.0, vLLM renamed ``gpu_cache_usage_perc`` to
``kv_cache_usage_perc`` (0.9) and ``time_per_output_token_seconds`` to
``inter_token_latency_seconds`` (0.11), and Triton's vLLM backend prints only tokens and
histograms. A release number is not on the page and would go stale, so each reading
takes the first name present in a fixed order of preference (docs/plans/issue18.md B3),
and a number no name gives stays None.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from tritonwatch.records.llm_records import ITL, TTFT, LlmBackend, LlmReadings
from tritonwatch.records.observations import ModelCounters, TritonHistogram
from tritonwatch.scrape import llm_families as llm
from tritonwatch.scrape.triton_families import FIRST_RESPONSE_HISTOGRAM_MS

_MILLISECONDS = 1e3


def _first(values: Mapping[tuple[str, str], float], *keys: tuple[str, str]) -> float | None:
    """The value of the first key present."""
    for key in keys:
        value = values.get(key)
        if value is not None:
            return value
    return None


def _kv_usage(values: Mapping[tuple[str, str], float]) -> float | None:
    """TensorRT-LLM's fraction, else used/max, else vLLM's usage (newer name first)."""
    fraction = values.get((llm.TRT_KV_BLOCKS, "fraction"))
    if fraction is not None:
        return fraction
    used = values.get((llm.TRT_KV_BLOCKS, "used"))
    blocks = values.get((llm.TRT_KV_BLOCKS, "max"))
    if used is not None and blocks is not None and blocks > 0:
        return used / blocks
    return _first(values, (llm.VLLM_KV_USAGE, ""), (llm.VLLM_GPU_CACHE_USAGE, ""))


def _in_seconds(histogram: TritonHistogram) -> TritonHistogram:
    """A millisecond histogram (Triton's first response) in seconds."""
    return TritonHistogram(
        tuple((bound / _MILLISECONDS, count) for bound, count in histogram.buckets),
        None if histogram.sum is None else histogram.sum / _MILLISECONDS,
        histogram.count,
    )


def _server_histograms(histograms: Mapping[str, TritonHistogram]) -> dict[str, TritonHistogram]:
    """The server's TTFT (vLLM's, else Triton's first response) and ITL (newer name first)."""
    chosen: dict[str, TritonHistogram] = {}
    ttft = histograms.get(llm.VLLM_TTFT)
    if ttft is None and (first := histograms.get(FIRST_RESPONSE_HISTOGRAM_MS)) is not None:
        ttft = _in_seconds(first)
    if ttft is not None:
        chosen[TTFT] = ttft
    itl = histograms.get(llm.VLLM_ITL) or histograms.get(llm.VLLM_TPOT)
    if itl is not None:
        chosen[ITL] = itl
    return chosen


def _backend(counters: ModelCounters) -> LlmBackend | None:
    """Who printed the LLM numbers; None when the page has none for this model."""
    names = {name for name, _ in counters.llm}
    names |= {name for name in counters.histograms if name in llm.LLM_FAMILIES_BY_NAME}
    backends = {llm.LLM_FAMILIES_BY_NAME[name].backend for name in names}
    if "tensorrt_llm" in backends:
        return "tensorrt_llm"
    if "vllm" in backends:
        return "vllm"
    return "triton" if FIRST_RESPONSE_HISTOGRAM_MS in counters.histograms else None


def _histogram_sum(histograms: Mapping[str, TritonHistogram], name: str) -> float | None:
    histogram = histograms.get(name)
    return histogram.sum if histogram is not None else None


def llm_readings(counters: ModelCounters) -> LlmReadings | None:
    """The LLM readings of one model's record; None when its page printed no LLM family
    (a plain Triton model)."""
    backend = _backend(counters)
    if backend is None:
        return None
    values, histograms = counters.llm, counters.histograms
    requests, blocks = llm.TRT_REQUESTS, llm.TRT_KV_BLOCKS
    prompt = values.get((llm.VLLM_PROMPT_TOKENS, ""))
    if prompt is None:
        prompt = _histogram_sum(histograms, llm.TRT_INPUT_TOKENS)
    generation = values.get((llm.VLLM_GENERATION_TOKENS, ""))
    if generation is None:
        generation = _histogram_sum(histograms, llm.TRT_OUTPUT_TOKENS)
    return LlmReadings(
        backend=backend,
        kv_cache_usage_ratio=_kv_usage(values),
        kv_blocks_used=values.get((blocks, "used")),
        kv_blocks_max=values.get((blocks, "max")),
        requests_running=_first(
            values, (requests, "scheduled"), (requests, "active"), (llm.VLLM_RUNNING, "")
        ),
        requests_waiting=_first(values, (requests, "waiting"), (llm.VLLM_WAITING, "")),
        requests_max=values.get((requests, "max")),
        paused_requests=values.get((llm.TRT_INFLIGHT_BATCHER, "paused_requests")),
        preemptions_total=values.get((llm.VLLM_PREEMPTIONS, "")),
        prompt_tokens_total=prompt,
        generation_tokens_total=generation,
        histograms=MappingProxyType(_server_histograms(histograms)),
    )
