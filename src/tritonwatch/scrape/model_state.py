"""One watched model's :class:`~tritonwatch.records.target_state.ModelState` from what a
scrape cycle read: ``/metrics``' counters and rates, the statistics API's rates, the
config, the canary's mean and the LLM readings.

A pure assembly for :class:`~tritonwatch.scrape.target_scraper.TargetScraper`: nothing
here is judged (the breakdown and bottleneck are the judgement's), and the choice
between two sources of the same reading is the record's
(:attr:`~tritonwatch.records.target_state.ModelState.cache`).
"""

from __future__ import annotations

from collections.abc import Mapping

from tritonwatch.records.llm_records import LlmRates, LlmReadings
from tritonwatch.records.observations import (
    BatchStatisticsRates,
    ModelConfigSnapshot,
    ModelKey,
    TritonRates,
    TritonScrape,
)
from tritonwatch.records.target_state import ModelState
from tritonwatch.scrape.triton_families import REQUEST_SUMMARY_US


def model_state(
    name: str,
    *,
    key: ModelKey,
    scrape: TritonScrape | None,
    rates: TritonRates | None,
    batches: Mapping[str, BatchStatisticsRates],
    canary: Mapping[str, tuple[float, int]],
    llm: tuple[LlmReadings | None, LlmRates | None],
    config: ModelConfigSnapshot | None,
    composing_models: tuple[str, ...],
) -> ModelState:
    """The model's state for the cycle.

    Args:
        name: the watched model; ``key`` its (model, version) as the page names it.
        scrape, rates: the cycle's ``/metrics`` page and its rates (None when it failed
            or was the first).
        batches: the statistics API's rates by model name.
        canary: the canary's (mean seconds, requests) over the rates' window by model.
        llm: the LLM backend's readings and their rates (None, None for another model).
        config: the last config snapshot; ``composing_models`` the config entry's.
    """
    model_rates = rates.models.get(key) if rates is not None else None
    counters = scrape.models.get(key) if scrape is not None else None
    mean, count = canary.get(name, (None, 0))
    span = model_rates.interval_seconds if model_rates is not None else 0.0
    return ModelState(
        model=name,
        rates=model_rates,
        server_summary=counters.summaries.get(REQUEST_SUMMARY_US) if counters else None,
        batches=batches.get(name),
        config=config,
        canary_mean_seconds=mean,
        llm_readings=llm[0],
        llm=llm[1],
        composing_models=composing_models,
        canary_requests_per_second=count / span if mean is not None and span else None,
    )
