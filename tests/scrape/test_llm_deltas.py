"""LLM counter rates between two scrapes (tokens/s, preemptions/s, server TTFT/ITL means),
counter resets, and the scraper putting them into ModelState."""

from __future__ import annotations

import math

import pytest
from sim_traffic import FakeClock

from stub_server import Route, StubServer
from support import fixtures_dir
from tritonwatch.config.schema import TargetConfig
from tritonwatch.records.llm_records import ITL, TTFT, LlmReadings
from tritonwatch.records.observations import TritonHistogram
from tritonwatch.scrape.llm_deltas import llm_rates
from tritonwatch.scrape.target_scraper import TargetScraper


def histogram(count: float, total: float) -> TritonHistogram:
    return TritonHistogram(((math.inf, count),), total, count)


def vllm(
    preemptions: float | None,
    prompt: float | None,
    generation: float | None,
    ttft: tuple[float, float] | None = None,
    itl: tuple[float, float] | None = None,
) -> LlmReadings:
    histograms = {}
    if ttft is not None:
        histograms[TTFT] = histogram(*ttft)
    if itl is not None:
        histograms[ITL] = histogram(*itl)
    return LlmReadings(
        backend="vllm",
        preemptions_total=preemptions,
        prompt_tokens_total=prompt,
        generation_tokens_total=generation,
        histograms=histograms,
    )


def test_rates_and_server_means_over_the_interval() -> None:
    """Breaks if a rate is not Δcounter / interval or a mean not Δsum / Δcount."""
    before = vllm(10, 1000, 500, ttft=(100, 5.0), itl=(4000, 40.0))
    after = vllm(16, 4000, 2500, ttft=(120, 7.0), itl=(6000, 70.0))
    rates = llm_rates(before, after, 20.0)
    assert rates.interval_seconds == 20.0
    assert rates.preemptions_per_second == pytest.approx(0.3)
    assert rates.prompt_tokens_per_second == pytest.approx(150.0)
    assert rates.generation_tokens_per_second == pytest.approx(100.0)
    assert rates.ttft_mean_seconds == pytest.approx(0.1)  # 2 s over 20 first tokens
    assert rates.itl_mean_seconds == pytest.approx(0.015)  # 30 s over 2000 gaps
    assert rates.counters_reset is False


def test_a_counter_that_went_down_restarts_every_counter_from_zero() -> None:
    """Breaks if a server restart gives a negative rate or mixes pre- and post-restart."""
    before = vllm(50, 9000, 8000, ttft=(100, 5.0))
    after = vllm(2, 300, 9000, ttft=(4, 0.8))  # restarted; generation already past 8000
    rates = llm_rates(before, after, 10.0)
    assert rates.counters_reset is True
    assert rates.preemptions_per_second == pytest.approx(0.2)
    assert rates.prompt_tokens_per_second == pytest.approx(30.0)
    assert rates.generation_tokens_per_second == pytest.approx(900.0)  # from zero, not +1000
    assert rates.ttft_mean_seconds == pytest.approx(0.2)


def test_numbers_a_reading_lacks_have_no_rate() -> None:
    """Breaks if an absent counter or an idle histogram is turned into a 0 rate or mean."""
    before = vllm(None, 10, 16, ttft=(1, 0.03))
    after = vllm(None, 70, 136, ttft=(1, 0.03), itl=(15, 0.045))
    rates = llm_rates(before, after, 30.0)
    assert rates.preemptions_per_second is None
    assert rates.prompt_tokens_per_second == pytest.approx(2.0)
    assert rates.ttft_mean_seconds is None  # no first token in the interval
    assert rates.itl_mean_seconds is None  # no previous histogram to subtract
    assert rates.counters_reset is False


def test_the_interval_must_be_positive() -> None:
    """Breaks if a zero interval divides by zero instead of being refused."""
    with pytest.raises(ValueError, match="interval_seconds"):
        llm_rates(vllm(1, 1, 1), vllm(1, 1, 1), 0.0)


_LATER_PAGE = b"""\
vllm:prompt_tokens_total{model="vllm_model",version="1"} 70
vllm:generation_tokens_total{model="vllm_model",version="1"} 136
vllm:time_to_first_token_seconds_count{model="vllm_model",version="1"} 3
vllm:time_to_first_token_seconds_sum{model="vllm_model",version="1"} 0.23233122825622559
vllm:time_to_first_token_seconds_bucket{model="vllm_model",version="1",le="+Inf"} 3
nv_inference_request_success{model="plain",version="1"} 4
"""


def test_the_scraper_puts_readings_and_rates_into_model_state(stub: StubServer) -> None:
    """Breaks if the scraper stops filling ModelState.llm_readings / .llm from /metrics."""
    page = (fixtures_dir() / "llm_metrics" / "vllm_backend_triton.txt").read_bytes()
    stub.routes["/metrics"] = Route(
        body=page + b'nv_inference_request_success{model="plain",version="1"} 1\n'
    )
    target = TargetConfig.model_validate(
        {
            "name": "llm",
            "url": stub.url,
            "metrics_url": f"{stub.url}/metrics",
            "models": [{"name": "vllm_model"}, {"name": "plain"}],
        }
    )
    clock = FakeClock()
    scraper = TargetScraper(target, 2.0, clock)
    assert scraper.scrape_once().ok
    first = scraper.state().models["vllm_model"]
    assert first.llm_readings is not None and first.llm is None  # a rate needs two scrapes
    assert first.llm_readings.prompt_tokens_total == 10.0
    stub.routes["/metrics"] = Route(body=_LATER_PAGE)
    clock.advance(30.0)
    assert scraper.scrape_once().ok
    state = scraper.state()
    model = state.models["vllm_model"]
    assert model.llm_readings is not None and model.llm_readings.generation_tokens_total == 136.0
    assert model.llm is not None
    assert model.llm.interval_seconds == pytest.approx(30.0)
    assert model.llm.prompt_tokens_per_second == pytest.approx(2.0)
    assert model.llm.generation_tokens_per_second == pytest.approx(4.0)
    assert model.llm.ttft_mean_seconds == pytest.approx(0.1)
    plain = state.models["plain"]
    assert plain.llm_readings is None and plain.llm is None
    assert plain.rates is not None
