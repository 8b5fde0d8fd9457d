"""Dashboard (6), LLM serving: the KV cache, the requests running and waiting for a slot,
preemptions and tokens per second, as the model's server (TensorRT-LLM backend, vLLM)
prints them. A full KV cache with preemptions or a waiting queue is what the KV-cache
advice acts on, so the three sit side by side; panels stay empty for a server that does
not print a number (Triton's vLLM backend has no KV-cache gauge)."""

from __future__ import annotations

from tritonwatch.dashboards.panels import Json, Query, Row, stat, thresholds, timeseries
from tritonwatch.dashboards.variables import dashboard, model_variable, sel, target_variable

UID = "tritonwatch-llm"
TITLE = "tritonwatch / LLM serving"

KV_USAGE = "tritonwatch_llm_kv_cache_usage_ratio"
REQUESTS = "tritonwatch_llm_requests"
PREEMPTIONS = "tritonwatch_llm_preemptions_total"
GENERATION = "tritonwatch_llm_generation_tokens_per_second"
PROMPT = "tritonwatch_llm_prompt_tokens_per_second"
LEGEND = "{{target}}/{{model}}"
KV_STEPS = thresholds((None, "green"), (0.8, "orange"), (0.9, "red"))
"""0.9 is the advisor's default ``kv_cache_full_ratio`` (docs/plans/issue18.md B4)."""


def _kv_cache_row() -> Row:
    return Row(
        "KV cache and scheduling",
        (
            timeseries(
                "KV cache usage",
                "Share of the KV cache in use: TensorRT-LLM's fraction (or used/max blocks), "
                "vLLM's kv_cache_usage_perc of its fullest engine. Near 1, new sequences "
                "wait or running ones are preempted.",
                Query(f"{KV_USAGE}{sel()}", LEGEND),
                unit="percentunit",
                maximum=1,
                width=9,
                threshold_lines=KV_STEPS,
            ),
            stat(
                "KV cache usage now",
                "The last KV cache usage of each selected model.",
                Query(f"{KV_USAGE}{sel()}", LEGEND),
                unit="percentunit",
                width=3,
                height=8,
                steps=KV_STEPS,
            ),
            timeseries(
                "Requests running and waiting",
                "Sequences in the server's batch (TensorRT-LLM scheduled, else active; vLLM "
                "running) and those waiting for a slot. Waiting with a full KV cache is KV "
                "pressure; waiting with room left is a max-sequences limit.",
                Query(REQUESTS + sel('state="running"'), LEGEND + " running"),
                Query(REQUESTS + sel('state="waiting"'), LEGEND + " waiting"),
                unit="short",
            ),
        ),
    )


def _throughput_row() -> Row:
    return Row(
        "Preemptions and tokens",
        (
            timeseries(
                "Preemptions per second",
                "Sequences the server evicted to free KV blocks (vLLM; TensorRT-LLM counts "
                "none). Each is recomputed later, so its tokens are paid for twice.",
                Query(f"rate({PREEMPTIONS}{sel()}[$__rate_interval])", LEGEND),
                unit="short",
            ),
            timeseries(
                "Tokens per second",
                "Output tokens generated and prompt tokens processed per second by the "
                "server, over the last scrape interval.",
                Query(f"{GENERATION}{sel()}", LEGEND + " generated"),
                Query(f"{PROMPT}{sel()}", LEGEND + " prompt"),
                unit="short",
            ),
        ),
    )


def build() -> Json:
    """The LLM serving dashboard."""
    return dashboard(
        UID,
        TITLE,
        "KV cache usage, requests running and waiting, preemptions and tokens per second "
        "of the LLM models, as their servers report them.",
        [target_variable(), model_variable()],
        [_kv_cache_row(), _throughput_row()],
    )
