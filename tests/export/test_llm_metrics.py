"""The LLM families on a real registry: promtool-clean, the readings' values, and no
series for a number the server did not print."""

from __future__ import annotations

from dataclasses import replace

import pytest

from support import assert_promtool_clean, exposition, fixtures_dir, sample_value
from tritonwatch.export.llm_metrics import LlmCollector
from tritonwatch.records.llm_records import LlmRates, LlmReadings
from tritonwatch.records.observations import ModelKey
from tritonwatch.records.target_state import ModelState, TargetState
from tritonwatch.scrape.llm_readings import llm_readings
from tritonwatch.scrape.triton_text import parse_triton_metrics

pytestmark = pytest.mark.real

FAMILIES = (
    "tritonwatch_llm_kv_cache_usage_ratio",
    "tritonwatch_llm_requests",
    "tritonwatch_llm_preemptions",
    "tritonwatch_llm_generation_tokens_per_second",
    "tritonwatch_llm_prompt_tokens_per_second",
)


def fixture_readings(fixture: str, key: ModelKey) -> LlmReadings:
    text = (fixtures_dir() / "llm_metrics" / f"{fixture}.txt").read_text()
    found = llm_readings(parse_triton_metrics(text, 0.0).models[key])
    assert found is not None
    return found


def target(name: str, **models: ModelState) -> TargetState:
    return TargetState(name, {}, 0, models, {}, {})


VLLM = ModelState(
    "llama",
    llm_readings=fixture_readings(
        "vllm_server_v1", ModelKey("meta-llama/Llama-3.1-8B-Instruct", "")
    ),
    llm=LlmRates(15.0, 0.2, 300.0, 120.5, 0.04, 0.012),
)
TRTLLM = ModelState(
    "ensemble",
    llm_readings=fixture_readings("trtllm_v0.18", ModelKey("tensorrt_llm", "1")),
)
VLLM_ON_TRITON = ModelState(
    "vllm_model", llm_readings=fixture_readings("vllm_backend_triton", ModelKey("vllm_model", "1"))
)
STATES = [
    target("vllm-a", llama=VLLM),
    target("triton-b", ensemble=TRTLLM, vllm_model=VLLM_ON_TRITON, plain=ModelState("plain")),
]


def llm_exposition(states: list[TargetState]) -> str:
    return exposition(LlmCollector(lambda: states))


def value(text: str, name: str, **labels: str) -> float | None:
    found: float | None = sample_value(text, name, list(labels.items()))
    return found


def test_exposition_passes_promtool_with_the_readings_values() -> None:
    """Breaks if a family is renamed, mistyped for promtool, or shows the wrong reading."""
    text = llm_exposition(STATES)
    assert_promtool_clean(text)
    llama = {"target": "vllm-a", "model": "llama"}
    assert value(text, "tritonwatch_llm_kv_cache_usage_ratio", **llama) == 0.97
    assert value(text, "tritonwatch_llm_requests", state="running", **llama) == 14.0
    assert value(text, "tritonwatch_llm_requests", state="waiting", **llama) == 4.0
    assert value(text, "tritonwatch_llm_preemptions_total", **llama) == 14.0
    assert value(text, "tritonwatch_llm_generation_tokens_per_second", **llama) == 120.5
    assert value(text, "tritonwatch_llm_prompt_tokens_per_second", **llama) == 300.0
    ensemble = {"target": "triton-b", "model": "ensemble"}
    assert value(text, "tritonwatch_llm_kv_cache_usage_ratio", **ensemble) == 0.4875
    assert value(text, "tritonwatch_llm_requests", state="running", **ensemble) == 1.0
    assert value(text, "tritonwatch_llm_requests", state="waiting", **ensemble) == 1.0


def test_numbers_the_server_did_not_print_have_no_series() -> None:
    """Breaks if an absent reading is exported as 0 (an empty cache, no preemptions)."""
    text = llm_exposition(STATES)
    ensemble = {"target": "triton-b", "model": "ensemble"}
    assert value(text, "tritonwatch_llm_preemptions_total", **ensemble) is None  # TRT-LLM
    assert value(text, "tritonwatch_llm_generation_tokens_per_second", **ensemble) is None
    on_triton = {"target": "triton-b", "model": "vllm_model"}
    assert value(text, "tritonwatch_llm_kv_cache_usage_ratio", **on_triton) is None
    assert value(text, "tritonwatch_llm_requests", **on_triton) is None
    assert 'model="plain"' not in text


def test_a_model_without_rates_yet_still_exports_its_gauges() -> None:
    """Breaks if the first scrape (readings, no rates) exports nothing."""
    first = replace(VLLM, llm=None)
    text = llm_exposition([target("vllm-a", llama=first)])
    llama = {"target": "vllm-a", "model": "llama"}
    assert value(text, "tritonwatch_llm_kv_cache_usage_ratio", **llama) == 0.97
    assert value(text, "tritonwatch_llm_generation_tokens_per_second", **llama) is None


@pytest.mark.parametrize("states", [[], [target("t", plain=ModelState("plain"))]])
def test_every_family_is_declared_without_series(states: list[TargetState]) -> None:
    """Breaks if a family vanishes from /metrics when no LLM is watched (the dashboard
    contract reads the daemon's # TYPE lines)."""
    text = llm_exposition(states)
    assert_promtool_clean(text)
    for family in FAMILIES:
        assert f"# TYPE {family}" in text
