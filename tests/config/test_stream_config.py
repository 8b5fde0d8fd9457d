"""Valid streaming configs: canary.stream defaults and overrides, openai, TTFT/ITL SLOs."""

from __future__ import annotations

import pytest

from tritonwatch.config import parse_config
from tritonwatch.config.canary_schema import Range

LLM = """
slo: {ttft: {threshold: 500ms}}
canary:
  stream: {max_tokens: {min: 16, max: 128}, parameters: {temperature: 0.5, ignore_eos: true}}
targets:
  - name: trtllm
    url: http://127.0.0.1:8000
    models:
      - name: ensemble
        canary: {stream: {mode: on, max_tokens: 32}}
        slo: {itl: {threshold: 50ms, objective: 0.99}}
      - {name: plain}
  - name: vllm
    url: http://127.0.0.1:8000
    openai_url: http://127.0.0.1:8000
    metrics_url: http://127.0.0.1:8000/metrics
    models:
      - name: llama
        served_name: meta-llama/Llama-3.1-8B-Instruct
        canary: {protocol: openai, stream: {openai_api: completions, prompt: Say hi}}
"""


def test_stream_defaults_are_the_trtllm_and_vllm_names() -> None:
    """Without a stream section the canary uses text_input/max_tokens/stream/text_output."""
    config = parse_config(
        "targets: [{name: a, url: http://127.0.0.1:8000, models: [{name: m}]}]\n", "d.yaml"
    )
    target = config.targets[0]
    model = target.models[0]
    stream = config.canary_for(target, model).stream
    assert stream.mode == "auto"
    assert stream.timeout == 30.0
    assert (stream.prompt, stream.prompt_words, stream.max_tokens) == (None, 32, 16)
    assert (stream.text_input, stream.max_tokens_input) == ("text_input", "max_tokens")
    assert (stream.stream_input, stream.text_output) == ("stream", "text_output")
    assert stream.parameters == {}
    assert (stream.openai_api, stream.include_usage) == ("chat", True)
    assert config.slo_for(model).ttft is None
    assert config.slo_for(model).itl is None
    assert target.openai_url is None
    assert model.served_name is None
    assert config.canary_for(target, model).request_timeout == 2.0  # auto: not sure to stream


def test_stream_fields_override_per_model_and_slos_merge() -> None:
    """A model's stream fields replace the global ones one by one; TTFT/ITL SLOs merge."""
    config = parse_config(LLM, "llm.yaml")
    trtllm = config.targets[0]
    ensemble, plain = trtllm.models
    own = config.canary_for(trtllm, ensemble).stream
    assert own.mode == "on"  # an unquoted YAML ``on`` is true: both mean on
    assert own.max_tokens == 32
    assert own.parameters == {"temperature": 0.5, "ignore_eos": True}
    assert config.canary_for(trtllm, plain).stream.max_tokens == Range(min=16, max=128)
    assert config.canary_for(trtllm, ensemble).request_timeout == 30.0
    slo = config.slo_for(ensemble)
    assert slo.ttft is not None and slo.ttft.threshold == pytest.approx(0.5)
    assert slo.ttft.objective == 0.99  # unwritten: the TTFT SLO's default, not latency's
    assert slo.itl is not None and slo.itl.threshold == pytest.approx(0.05)
    assert slo.itl.objective == 0.99
    assert config.slo_for(plain).itl is None


def test_openai_canary_reads_its_url_and_served_name() -> None:
    """Protocol openai is accepted with openai_url; served_name is kept as written."""
    config = parse_config(LLM, "llm.yaml")
    vllm = config.targets[1]
    llama = vllm.models[0]
    canary = config.canary_for(vllm, llama)
    assert canary.protocol == "openai"
    assert canary.streams_surely
    assert canary.request_timeout == 30.0
    assert canary.stream.openai_api == "completions"
    assert canary.stream.prompt == "Say hi"
    assert vllm.openai_url == "http://127.0.0.1:8000"
    assert llama.served_name == "meta-llama/Llama-3.1-8B-Instruct"
    assert vllm.protocol == "http"  # the target's own URL still speaks KServe v2


@pytest.mark.parametrize(("written", "mode"), [("off", "off"), ('"off"', "off"), ("false", "off"),
                                               ("true", "on"), ("auto", "auto")])  # fmt: skip
def test_stream_mode_spellings(written: str, mode: str) -> None:
    """on/off read the same quoted or not (YAML 1.1 makes them booleans)."""
    config = parse_config(
        f"canary: {{stream: {{mode: {written}}}}}\n"
        "targets: [{name: a, url: http://127.0.0.1:8000, models: [{name: m}]}]\n",
        "m.yaml",
    )
    assert config.canary.stream.mode == mode


def test_a_range_of_equal_ends_is_a_fixed_length() -> None:
    """min == max is allowed (only min > max is refused)."""
    config = parse_config(
        "canary: {stream: {prompt_words: {min: 8, max: 8}}}\n"
        "targets: [{name: a, url: http://127.0.0.1:8000, models: [{name: m}]}]\n",
        "r.yaml",
    )
    assert config.canary.stream.prompt_words == Range(min=8, max=8)
