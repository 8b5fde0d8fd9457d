"""Which SLOs judge a model that streams (``SLOConfig.judged``) and the check-config
warning about a written latency shorter than the stream the canary asks for."""

from __future__ import annotations

import pytest

from tritonwatch.config import parse_config
from tritonwatch.config.checks import config_warnings
from tritonwatch.config.slo_schema import (
    DEFAULT_ITL,
    DEFAULT_TTFT,
    LatencySLO,
    SLOConfig,
    stream_latency_warning,
)


def _slo(text: str) -> SLOConfig:
    """The SLOs of model ``m`` of a config whose ``slo``/model sections ``text`` gives."""
    config = parse_config(text, "slo.yaml")
    return config.slo_for(config.targets[0].models[0])


def _config(global_slo: str = "", model_slo: str = "") -> str:
    own = f", slo: {model_slo}" if model_slo else ""
    head = f"slo: {global_slo}\n" if global_slo else ""
    return head + f"targets: [{{name: t, url: http://h:8000, models: [{{name: m{own}}}]}}]\n"


def test_the_stream_defaults_are_mlperfs_server_constraints() -> None:
    """Breaks if the TTFT/ITL defaults move from MLPerf's p99 within 2 s / 200 ms."""
    assert (DEFAULT_TTFT.threshold, DEFAULT_TTFT.objective) == (2.0, 0.99)
    assert (DEFAULT_ITL.threshold, DEFAULT_ITL.objective) == (0.2, 0.99)


def test_a_plain_model_keeps_latency_and_only_written_stream_slos() -> None:
    """Breaks if a model that does not stream loses its latency SLO or gets TTFT/ITL
    SLOs nobody wrote."""
    judged = _slo(_config()).judged(streams=False)
    assert judged.latency == LatencySLO()
    assert (judged.ttft, judged.itl) == (None, None)
    assert list(judged.by_kind()) == ["latency"]


def test_a_stream_is_judged_by_ttft_and_itl_and_not_by_the_default_latency() -> None:
    """Breaks if a streamed model's whole stream is judged against the 50 ms default, or
    it gets no TTFT/ITL SLO unless one is written."""
    judged = _slo(_config()).judged(streams=True)
    assert judged.latency is None
    assert (judged.ttft, judged.itl) == (DEFAULT_TTFT, DEFAULT_ITL)
    assert list(judged.by_kind()) == ["ttft", "itl"]


@pytest.mark.parametrize(
    ("global_slo", "model_slo"),
    [
        ("{latency: {threshold: 1s}}", ""),
        ("", "{latency: {threshold: 1s}}"),
        ("{latency: {objective: 0.9}}", "{latency: {threshold: 1s}}"),
    ],
)
def test_a_written_latency_judges_the_stream_too(global_slo: str, model_slo: str) -> None:
    """Breaks if an explicit slo.latency (global or per model) stops judging a stream."""
    slo = _slo(_config(global_slo, model_slo))
    assert slo.latency_set
    latency = slo.judged(streams=True).latency
    assert latency is not None and latency.threshold == 1.0


def test_written_stream_slos_win_fill_from_their_own_defaults_and_null_turns_off() -> None:
    """Breaks if a written TTFT field is lost, an unwritten one comes from the latency
    defaults (95 %, 50 ms) instead of the TTFT/ITL ones, or ``null`` does not turn the
    SLO off for a stream."""
    slo = _slo(_config("{ttft: {threshold: 500ms}}", "{itl: null}"))
    judged = slo.judged(streams=True)
    assert judged.ttft is not None
    assert (judged.ttft.threshold, judged.ttft.objective) == (0.5, 0.99)
    assert judged.itl is None
    assert _slo(_config("", "{itl: {objective: 0.9}}")).judged(True).itl == (
        DEFAULT_ITL.model_copy(update={"objective": 0.9})
    )


def _streaming(model: str, global_slo: str = "", model_slo: str = "") -> str:
    head = f"slo: {global_slo}\n" if global_slo else ""
    own = f", slo: {model_slo}" if model_slo else ""
    return (
        head + "targets:\n  - name: t\n    url: http://h:8000\n"
        "    openai_url: http://h:9000\n    models:\n"
        f"      - {{name: a, {model}{own}}}\n"
        f"      - {{name: b, {model}}}\n"
    )


def test_a_written_latency_shorter_than_the_stream_is_warned_once() -> None:
    """Breaks if a written latency below max_tokens × the ITL threshold passes silently
    for a model that surely streams, or a global one is named once per model."""
    config = parse_config(
        _streaming("canary: {stream: {mode: on}}", "{latency: {threshold: 2s}}"), "w.yaml"
    )
    (warning,) = config_warnings(config)
    assert warning.path == "slo.latency.threshold"
    assert warning.value == "2s"
    assert warning.message.startswith(
        "is shorter than a stream the canary asks for: 16 tokens (canary.stream.max_tokens) "
        "× the 200ms ITL threshold = 3200ms"
    )


def test_the_warning_reads_the_largest_max_tokens_and_the_models_itl() -> None:
    """Breaks if a {min, max} length is read by its min, or the model's own ITL threshold
    (not the default) is not what the stream is measured with."""
    ranged = _streaming(
        "canary: {protocol: openai, stream: {max_tokens: {min: 2, max: 40}}}",
        model_slo="{latency: {threshold: 1500ms}, itl: {threshold: 50ms}}",
    )
    (warning,) = config_warnings(parse_config(ranged, "r.yaml"))
    assert warning.path == "targets[0].models[0].slo.latency.threshold"
    assert "40 tokens (canary.stream.max_tokens) × the 50ms ITL threshold = 2s" in warning.message


@pytest.mark.parametrize(
    "text",
    [
        # Long enough: 16 × 200 ms = 3.2 s.
        _streaming("canary: {stream: {mode: on}}", "{latency: {threshold: 4s}}"),
        # No latency written: a stream is judged by TTFT and ITL alone.
        _streaming("canary: {stream: {mode: on}}"),
        # auto: the daemon warns once it finds the model streaming, not check-config.
        _streaming("canary: {stream: {mode: auto}}", "{latency: {threshold: 1s}}"),
    ],
)
def test_no_warning_where_the_stream_fits_or_is_not_known(text: str) -> None:
    assert config_warnings(parse_config(text, "ok.yaml")) == []


def test_the_message_names_the_numbers() -> None:
    """Breaks if the warning's arithmetic is wrong at the boundary (equal is fine)."""
    slo = _slo(_config("{latency: {threshold: 800ms}}"))
    assert stream_latency_warning(slo, 4) is None  # 4 × 200 ms = 800 ms: fits
    message = stream_latency_warning(slo, 5)
    assert message is not None and "= 1s," in message
