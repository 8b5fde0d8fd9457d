"""The LLM serving numbers a model's server prints, exported per model (docs/design.md §8).

:class:`LlmCollector` renders ``ModelState.llm_readings`` (the last scrape's gauges and
counters) and ``ModelState.llm`` (their rates) of every target at scrape time, the way
:class:`~tritonwatch.export.triton_metrics.TritonModelCollector` renders the Triton
numbers: one family per reading, the same ``{target, model}`` labels, and a series
only where the server printed the number. A vLLM backend on Triton prints no KV-cache
gauge, so it has no ``tritonwatch_llm_kv_cache_usage_ratio`` series rather than a 0 that
would read as an empty cache. Every family is declared even without series, so the
dashboards' metric contract sees it on any daemon.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tritonwatch.records.llm_records import LlmRates, LlmReadings
from tritonwatch.records.target_state import ModelState, TargetState

_MODEL = ["target", "model"]


@dataclass(frozen=True, slots=True)
class _LlmGauge:
    """A per-model gauge read off the readings or the rates."""

    name: str
    help: str
    read: Callable[[LlmReadings | None, LlmRates | None], float | None]


_GAUGES: tuple[_LlmGauge, ...] = (
    _LlmGauge(
        "tritonwatch_llm_kv_cache_usage_ratio",
        "Share of the KV cache in use at the last scrape (0-1): TensorRT-LLM's fraction or "
        "used/max blocks, vLLM's kv_cache_usage_perc (the fullest engine).",
        lambda readings, _: readings.kv_cache_usage_ratio if readings else None,
    ),
    _LlmGauge(
        "tritonwatch_llm_generation_tokens_per_second",
        "Output tokens the server generated per second over the last scrape interval.",
        lambda _, rates: rates.generation_tokens_per_second if rates else None,
    ),
    _LlmGauge(
        "tritonwatch_llm_prompt_tokens_per_second",
        "Prompt (prefill) tokens the server processed per second over the last scrape interval.",
        lambda _, rates: rates.prompt_tokens_per_second if rates else None,
    ),
)


def _requests_by_state(readings: LlmReadings | None) -> list[tuple[str, float]]:
    if readings is None:
        return []
    found = [("running", readings.requests_running), ("waiting", readings.requests_waiting)]
    return [(state, value) for state, value in found if value is not None]


def _llm_models(states: Iterable[TargetState]) -> Iterator[tuple[str, ModelState]]:
    """Every model with LLM readings, in target then model order."""
    for state in states:
        for name in sorted(state.models):
            model = state.models[name]
            if model.llm_readings is not None:
                yield state.target, model


class LlmCollector(Collector):
    """Renders every target's LLM readings; register it once on the daemon's registry.

    Args:
        states: returns the latest state of every target (the bottleneck board's).
    """

    def __init__(self, states: Callable[[], Iterable[TargetState]]) -> None:
        self._states = states

    def collect(self) -> Iterator[Metric]:
        models = list(_llm_models(self._states()))
        for gauge in _GAUGES:
            family = GaugeMetricFamily(gauge.name, gauge.help, labels=_MODEL)
            for target, model in models:
                value = gauge.read(model.llm_readings, model.llm)
                if value is not None:
                    family.add_metric([target, model.model], value)
            yield family
        requests = GaugeMetricFamily(
            "tritonwatch_llm_requests",
            "Requests in the server's batch (running: TensorRT-LLM scheduled, else active; "
            "vLLM running) and waiting for a slot, at the last scrape.",
            labels=[*_MODEL, "state"],
        )
        preemptions = CounterMetricFamily(
            "tritonwatch_llm_preemptions",
            "Preemptions the server counted (vLLM's num_preemptions), as it prints them; "
            "absent for servers that count none (TensorRT-LLM).",
            labels=_MODEL,
        )
        for target, model in models:
            for state, value in _requests_by_state(model.llm_readings):
                requests.add_metric([target, model.model, state], value)
            total = model.llm_readings.preemptions_total if model.llm_readings else None
            if total is not None:
                preemptions.add_metric([target, model.model], total)
        yield requests
        yield preemptions
