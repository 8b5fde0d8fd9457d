"""What a server's page says about an LLM model, and how it moved between two scrapes.

Records only, like :mod:`tritonwatch.records.observations`: the scrape fills them
(:mod:`~tritonwatch.scrape.llm_readings`, :mod:`~tritonwatch.scrape.llm_deltas`), the
exporter and, later, the advisor read them. Every number is ``float | None`` and None
means the page did not print it: a vLLM backend on Triton has no KV-cache gauge, and
reading that as 0 would tell the advisor the cache is empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from tritonwatch.records.observations import TritonHistogram

LlmBackend = Literal["tensorrt_llm", "vllm", "triton"]
"""Who printed the numbers: the TensorRT-LLM backend, vLLM (its server or Triton's vLLM
backend), or Triton core alone (its first-response histogram of a decoupled model)."""

TTFT = "ttft"
ITL = "itl"
"""The keys of :attr:`LlmReadings.histograms`: the server's time to first token and its
inter-token (time per output token) histogram."""


def _no_histograms() -> Mapping[str, TritonHistogram]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class LlmReadings:
    """One model's LLM numbers from one scrape, whichever backend printed them.

    ``kv_cache_usage_ratio`` is 0-1. ``requests_running`` is TensorRT-LLM's scheduled
    requests (else its active ones) or vLLM's running ones. ``preemptions_total`` and the
    token totals are the server's cumulative counters. ``histograms`` holds the server's
    TTFT and ITL histograms under :data:`TTFT`/:data:`ITL`, in seconds (Triton's
    first-response histogram, printed in ms, is converted).
    """

    backend: LlmBackend
    kv_cache_usage_ratio: float | None = None
    kv_blocks_used: float | None = None
    kv_blocks_max: float | None = None
    requests_running: float | None = None
    requests_waiting: float | None = None
    requests_max: float | None = None
    paused_requests: float | None = None
    preemptions_total: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    histograms: Mapping[str, TritonHistogram] = field(default_factory=_no_histograms)


@dataclass(frozen=True, slots=True)
class LlmRates:
    """One model's LLM counters turned into rates over one scrape interval.

    ``ttft_mean_seconds``/``itl_mean_seconds`` are the server's mean over the interval
    (Δsum / Δcount of its histograms), None when it printed none or saw no request.
    ``counters_reset`` is True when a counter went down (a server restart): the rates
    then count from zero, as :mod:`~tritonwatch.scrape.triton_deltas` does.
    """

    interval_seconds: float
    preemptions_per_second: float | None = None
    prompt_tokens_per_second: float | None = None
    generation_tokens_per_second: float | None = None
    ttft_mean_seconds: float | None = None
    itl_mean_seconds: float | None = None
    counters_reset: bool = False
