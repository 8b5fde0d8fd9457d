"""The OpenAI protocol end to end: the daemon's streaming canaries on the simulator's
``/v1/chat/completions`` and ``/v1/completions``, read back from the daemon's page.

No vLLM or trtllm-serve runs on a CPU host, so the simulator's OpenAI routes stand in
(they frame chunks as vLLM does: a role-only first chat chunk, one chunk per token, a
usage chunk, ``[DONE]``; tests/sim/test_llm_frontends.py). The token counts are the
server's own: each request asks for a sampled ``max_tokens``, and the daemon's counter
must equal the simulator's ``vllm:generation_tokens_total`` for the model, which only
the canary feeds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support import DaemonProcess, http_get, wait_until
from tritonwatch.sim.models import ModelSet, parse_model_set
from tritonwatch.sim.server import Simulator

pytestmark = pytest.mark.real

DECODE_STEP_S = 0.010
"""The simulated engine's decode step: no token can come sooner after the one before."""
ENOUGH_STREAMS = 20
"""Clean streams per model before the figures are read."""
MODELS = {"llama-chat": "chat", "llama-complete": "completions"}
"""Simulated vLLM model → the OpenAI API its canary streams from."""


def _models() -> ModelSet:
    """Two vLLM-flavoured models with 10 ms decode steps and a cheap prefill."""
    llm = {"backend": "vllm", "prefill_per_token": "20us", "decode_step_base": "10ms"}
    models = [{"name": name, "max_batch_size": 0, "llm": llm} for name in MODELS]
    return parse_model_set(
        {"gpus": [{"uuid": "GPU-11111111-0000-4000-8000-000000000000"}], "models": models}
    )


def _config(sim: Simulator, path: Path) -> Path:
    """One target per API; the chat one's ``openai_url`` ends in ``/v1`` as OpenAI
    clients take it, the other's is the bare server URL. ``url`` (which the config needs)
    is the simulator's KServe side; it serves the scrape only."""
    path.write_text(
        f"""
targets:
  - name: oa-chat
    url: {sim.http_url}
    metrics_url: {sim.metrics_url}
    openai_url: {sim.http_url}/v1
    models:
      - {{name: llama-chat, canary: {{protocol: openai, stream: {{openai_api: chat}}}}}}
  - name: oa-complete
    url: {sim.http_url}
    metrics_url: {sim.metrics_url}
    openai_url: {sim.http_url}
    models:
      - {{name: llama-complete, canary: {{protocol: openai, stream: {{openai_api: completions}}}}}}
canary: {{rate: 5/s, stream: {{max_tokens: {{min: 2, max: 12}}, timeout: 10s}}}}
scrape: {{interval: 1s, timeout: 800ms}}
"""
    )
    return path


def _samples(text: str, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    """Every sample ``name`` in exposition ``text`` whose labels include ``labels``."""
    from prometheus_client.parser import text_string_to_metric_families

    return [
        (sample.labels, float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    ]


def _counted(sim: Simulator, daemon: DaemonProcess) -> dict[str, tuple[float, float, float]]:
    """Per model: (clean streams, tokens at the daemon, tokens the simulator generated);
    the daemon's page is read first, so a stream in flight shows on the simulator's side."""
    text = daemon.metrics()
    _, server_page = http_get(sim.metrics_url)
    counted = {}
    for model in MODELS:
        requests = _samples(text, "tritonwatch_canary_requests_total", model=model,
                            protocol="openai")  # fmt: skip
        succeeded = sum(v for labels, v in requests if labels["outcome"] == "success")
        clean = succeeded if succeeded == sum(v for _, v in requests) else -1.0
        tokens = _samples(text, "tritonwatch_canary_output_tokens_total", model=model,
                          protocol="openai")  # fmt: skip
        generated = _samples(server_page, "vllm:generation_tokens_total", model_name=model)
        counted[model] = (clean, sum(v for _, v in tokens), sum(v for _, v in generated))
    return counted


def test_openai_canaries_export_ttft_itl_and_the_servers_token_counts(tmp_path: Path) -> None:
    """Fails if an OpenAI canary (chat or completions, openai_url with or without /v1)
    fails its streams on the simulator, exports no TTFT/ITL quantiles, or counts other
    output tokens than the server generated and reported in its usage chunks."""
    with Simulator(_models()) as sim:
        daemon = DaemonProcess(_config(sim, tmp_path / "tritonwatch.yaml"))
        try:

            def settled() -> str | None:
                """A moment with enough clean streams and no stream in flight: the
                daemon's tokens equal the simulator's for every model."""
                counted = _counted(sim, daemon)
                if all(
                    n >= ENOUGH_STREAMS and ours == theirs for n, ours, theirs in counted.values()
                ):
                    return daemon.metrics()
                return None

            try:
                text = wait_until(settled, 60, f"{ENOUGH_STREAMS} clean streams per model", 0.3)
            except AssertionError as error:
                raise AssertionError(f"{error}: {_counted(sim, daemon)}") from None
        finally:
            assert daemon.stop() == 0, daemon.stderr_so_far()
    for model in MODELS:
        [(_, streams)] = _samples(
            text,
            "tritonwatch_canary_stream_quantile_seconds_count",
            model=model,
            protocol="openai",
            measure="ttft",
        )
        [(_, tokens)] = _samples(text, "tritonwatch_canary_output_tokens_total", model=model)
        # Sampled lengths: the count is the server's per stream, not streams × a constant.
        assert 2 * streams <= tokens <= 12 * streams, (model, streams, tokens)
        for measure in ("ttft", "itl"):
            quantiles = _samples(
                text,
                "tritonwatch_canary_stream_quantile_seconds",
                model=model,
                protocol="openai",
                measure=measure,
                window="5m",
            )
            by_q = {labels["quantile"]: value for labels, value in quantiles}
            assert set(by_q) >= {"0.5", "0.95"}, (model, measure, quantiles)
            # A first token needs one decode step after the prefill, each later one another.
            assert by_q["0.5"] >= DECODE_STEP_S * 0.9, (model, measure, by_q)
