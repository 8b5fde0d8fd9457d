"""The LLM scenarios produce the numbers they promise, read from the simulator's /metrics,
under loads a canary or a short burst applies, driven in process (on virtual time where
the test reads figures, not states seen while the load runs)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from llm_support import llm_model_set

from tritonwatch.sim.load import StreamLoadResult, stream_closed_loop
from tritonwatch.sim.server import Simulator
from tritonwatch.sim.testing import Scrape, scrape, wait_for

pytestmark = pytest.mark.sim

LOAD_TIMEOUT_S = 120.0
DEFAULT_COSTS = {"prefill_per_token": 150, "decode_step_base": 8000, "decode_step_per_seq": 150}


def vllm(page: Scrape, name: str) -> float:
    return page.value(name, model_name="vl", engine="0")


def trtllm(page: Scrape, family: str, split: str, value: str) -> float:
    return page.value(family, model="trt", version="1", **{split: value})


def test_kv_cache_pressure_fills_the_cache_preempts_and_queues(
    start_sim: Callable[..., Simulator],
) -> None:
    """Breaks if kv-cache-pressure under 60 streams misses KV ≥ 0.95, waiting or preemptions."""
    sim = start_sim(models=llm_model_set(), scenario="kv-cache-pressure")
    results: list[StreamLoadResult] = []

    def load() -> None:
        for model in ("vl", "trt"):
            results.append(
                sim.run_async(
                    lambda core, model=model: stream_closed_loop(
                        core,
                        model,
                        concurrency=60,
                        streams_per_worker=1,
                        prompt_words=300,
                        max_tokens=128,
                    ),
                    LOAD_TIMEOUT_S,
                )
            )

    runner = threading.Thread(target=load, daemon=True)
    runner.start()
    seen: dict[str, tuple[float, float, float]] = {}

    def pressured() -> bool:
        page = scrape(sim)
        vl = (
            vllm(page, "vllm:kv_cache_usage_perc"),
            vllm(page, "vllm:num_requests_waiting"),
            vllm(page, "vllm:num_preemptions"),
        )
        if vl[0] >= 0.95 and vl[1] > 0 and vl[2] > 0:
            seen.setdefault("vl", vl)
        trt = (
            trtllm(page, "nv_trt_llm_kv_cache_block_metrics", "kv_cache_block_type", "fraction"),
            trtllm(page, "nv_trt_llm_request_metrics", "request_type", "waiting"),
            trtllm(
                page,
                "nv_trt_llm_inflight_batcher_metrics",
                "inflight_batcher_specific_metric",
                "paused_requests",
            ),
        )
        if trt[0] >= 0.95 and trt[1] > 0 and trt[2] > 0:
            seen.setdefault("trt", trt)
        return len(seen) == 2 or not runner.is_alive()

    wait_for(pressured, timeout_s=LOAD_TIMEOUT_S, step_s=0.05)
    assert set(seen) == {"vl", "trt"}, seen
    runner.join(LOAD_TIMEOUT_S)
    assert not runner.is_alive()
    assert [(r.completed, r.failed, r.tokens) for r in results] == [(60, 0, 60 * 128)] * 2
    page = scrape(sim)
    assert vllm(page, "vllm:num_preemptions") >= seen["vl"][2] > 0
    # 40 sequences of 512 tokens at 16 tokens per block
    assert trtllm(page, "nv_trt_llm_kv_cache_block_metrics", "kv_cache_block_type", "max") == 1280
    assert trtllm(page, "nv_trt_llm_request_metrics", "request_type", "max") == 128


def test_ttft_queueing_grows_ttft_with_the_queue_while_itl_stays_flat(
    start_sim: Callable[..., Simulator],
) -> None:
    """Breaks if ttft-queueing stops queueing (TTFT in waves of 4, ×3 mean) or ITL moves
    by more than the 150 µs per extra running sequence."""
    sim = start_sim(
        models=llm_model_set(vl=DEFAULT_COSTS), scenario="ttft-queueing", clock="virtual"
    )

    def means(concurrency: int, streams_per_worker: int) -> tuple[float, float, list[float]]:
        before = scrape(sim)
        result = sim.run_async(
            lambda core: stream_closed_loop(
                core,
                "vl",
                concurrency=concurrency,
                streams_per_worker=streams_per_worker,
                prompt_words=32,
                max_tokens=32,
            ),
            LOAD_TIMEOUT_S,
        )
        assert result.failed == 0 and result.tokens == result.completed * 32
        after = scrape(sim)

        def mean(family: str) -> float:
            total = vllm(after, f"{family}_sum") - vllm(before, f"{family}_sum")
            count = vllm(after, f"{family}_count") - vllm(before, f"{family}_count")
            return total / count

        return (
            mean("vllm:time_to_first_token_seconds"),
            mean("vllm:inter_token_latency_seconds"),
            sorted(result.ttft_s),
        )

    alone_ttft, alone_itl, _ = means(concurrency=1, streams_per_worker=3)
    queued_ttft, queued_itl, queued = means(concurrency=12, streams_per_worker=1)
    # Virtual time, so the engine's own numbers: a decode step is 8 ms + 150 µs per
    # running sequence (1 alone, 4 when queued: ITL barely moves) ...
    assert (round(alone_itl, 6), round(queued_itl, 6)) == (0.00815, 0.0086)
    assert queued_ttft > 3 * alone_ttft
    # ... and 4 run while 8 wait for a whole generation: first tokens come in three waves
    # (without the limit all 12 would get theirs in the same step)
    assert [round(ttft, 4) for ttft in queued] == [0.3158] * 4 + [0.8982] * 4 + [1.4806] * 4
    page = scrape(sim)
    assert vllm(page, "vllm:prompt_tokens") == 15 * 512  # 32 words × 16 tokens per word
