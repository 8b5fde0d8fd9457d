"""``slo_specs`` for models that stream: TTFT and ITL by default, latency only where
written, and the mark the rule generator reads on a default latency that may go."""

from __future__ import annotations

from tritonwatch.analysis.slo import SLOKind, slo_specs
from tritonwatch.config import parse_config

CONFIG = """
targets:
  - name: t
    url: http://h:8000
    openai_url: http://h:9000
    models:
      - {name: plain}
      - {name: never, canary: {stream: {mode: off}}}
      - {name: always, canary: {stream: {mode: on}}}
      - {name: openai, canary: {protocol: openai}}
      - {name: written, canary: {stream: {mode: on}}, slo: {latency: {threshold: 1s}}}
      - {name: auto_written, slo: {latency: {threshold: 1s}}}
"""


def _kinds(streaming: set[tuple[str, str]] | None = None) -> dict[str, list[str]]:
    specs = slo_specs(parse_config(CONFIG, "s.yaml"), streaming or set())
    kinds: dict[str, list[str]] = {}
    for spec in specs:
        kinds.setdefault(spec.model, []).append(str(spec.kind))
    return kinds


def test_models_the_file_says_stream_get_ttft_and_itl_and_no_default_latency() -> None:
    """Breaks if a model with stream.mode on or protocol openai is judged by the 50 ms
    default latency, or gets no TTFT/ITL SLO without one written; or if a written
    latency is dropped, or a plain model loses its latency SLO."""
    assert _kinds() == {
        "plain": ["latency", "availability"],
        "never": ["latency", "availability"],
        "always": ["availability", "ttft", "itl"],
        "openai": ["availability", "ttft", "itl"],
        "written": ["latency", "availability", "ttft", "itl"],
        "auto_written": ["latency", "availability"],
    }


def test_a_model_found_streaming_at_run_time_is_judged_as_a_stream() -> None:
    """Breaks if the models the canary found decoupled keep the default latency SLO or
    get no TTFT/ITL SLOs, or if a written latency stops judging them."""
    kinds = _kinds({("t", "plain"), ("t", "auto_written")})
    assert kinds["plain"] == ["availability", "ttft", "itl"]
    assert kinds["auto_written"] == ["latency", "availability", "ttft", "itl"]
    assert _kinds({("other", "plain")})["plain"] == ["latency", "availability"]


def test_only_a_default_latency_that_may_stream_is_marked_for_the_rules() -> None:
    """Breaks if the rules would drop a latency SLI a user wrote, one of a model that
    never streams (mode off), or keep the default one of a model that may stream."""
    specs = slo_specs(parse_config(CONFIG, "s.yaml"))
    marked = {s.model for s in specs if s.off_if_streaming}
    assert marked == {"plain"}
    assert all(s.kind == SLOKind.LATENCY for s in specs if s.off_if_streaming)
