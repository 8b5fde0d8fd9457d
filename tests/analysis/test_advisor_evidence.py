"""The advisor's input from one evaluation's records: stream quantiles, SLO burns, the
LLM window between evaluations, and the KV-cache pressure log line."""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from tritonwatch.analysis.advisor_evidence import KvPressureLog, LlmWindows, advisor_input_for
from tritonwatch.analysis.advisor_records import AdvisorInput, AdvisorThresholds
from tritonwatch.analysis.slo import BURN_POLICY, SliSource, SLOKind, SLOSpec, SLOStatus
from tritonwatch.config.schema import Config
from tritonwatch.records.llm_records import LlmRates, LlmReadings
from tritonwatch.records.observations import ModelConfigSnapshot
from tritonwatch.records.target_state import ModelState, TargetState
from tritonwatch.state.stream_board import HistogramSnapshot, StreamSnapshot

TTFT_KIND: Any = getattr(SLOKind, "TTFT", "ttft")
ITL_KIND: Any = getattr(SLOKind, "ITL", "itl")
"""The stream SLO kinds, whether or not this checkout's SLOKind has them yet."""


def _config(**slo: object) -> Config:
    return Config.model_validate(
        {
            "targets": [{"name": "t", "url": "http://127.0.0.1:8000", "models": [{"name": "m"}]}],
            "slo": slo,
        }
    )


def _state(raw: dict[str, object]) -> TargetState:
    config = ModelConfigSnapshot("m", 0.0, 0, None, (), raw)
    return TargetState("t", {}, 0, {"m": ModelState("m", config=config)}, {}, {})


def _stream(ttft_p95: float, itl_p95: float) -> StreamSnapshot:
    empty = HistogramSnapshot((0,), 0.0, 0)
    return StreamSnapshot(
        "t",
        "m",
        "http",
        empty,
        empty,
        0,
        {"ttft": {"5m": {0.95: ttft_p95}}, "itl": {"1m": {0.95: 9.0}, "5m": {0.95: itl_p95}}},
    )


def _status(kind: Any, model: str, firing: bool) -> SLOStatus:
    spec = SLOSpec("t", model, kind, 0.95, 86400.0, 0.5)
    return SLOStatus(spec, SliSource.CANARY, {}, None, BURN_POLICY[0] if firing else None)


def _input(config: Config, state: TargetState, **kwargs: Any) -> AdvisorInput:
    target = config.targets[0]
    return advisor_input_for(
        config, target, target.models[0], state, snapshot=None, samples=[], **kwargs
    )


def test_stream_quantiles_budgets_and_burns_reach_the_input() -> None:
    """The 5m TTFT/ITL p95, the TTFT/ITL SLO thresholds and only this model's firing burns."""
    config = _config(ttft={"threshold": "500ms"}, itl={"threshold": "50ms"})
    statuses = [
        _status(TTFT_KIND, "m", firing=True),
        _status(ITL_KIND, "m", firing=False),
        _status(ITL_KIND, "other", firing=True),
    ]
    window = _input(config, _state({}), stream=_stream(0.8, 0.04), statuses=statuses)
    assert (window.ttft_p95_seconds, window.itl_p95_seconds) == (0.8, 0.04)
    assert (window.ttft_budget_seconds, window.itl_budget_seconds) == (0.5, 0.05)
    assert (window.ttft_burning, window.itl_burning) == (True, False)
    assert window.streaming


def test_streaming_is_known_from_the_decoupled_config_alone() -> None:
    """A decoupled model is streaming before its canary streams; a plain one is not."""
    decoupled = _state({"model_transaction_policy": {"decoupled": True}})
    assert _input(_config(), decoupled).streaming
    plain = _input(_config(), _state({"model_transaction_policy": {"decoupled": False}}))
    assert not plain.streaming
    assert (plain.ttft_budget_seconds, plain.ttft_p95_seconds, plain.ttft_burning) == (
        None,
        None,
        False,
    )


def test_llm_window_counts_each_scrape_once_and_forgets_old_ones() -> None:
    """The same readings seen at two evaluations count once; older than the span go."""
    windows = LlmWindows()
    first = ModelState("m", llm_readings=LlmReadings("vllm", kv_cache_usage_ratio=0.5))
    rates = LlmRates(1.0, preemptions_per_second=2.0)
    second = ModelState("m", llm_readings=LlmReadings("vllm", kv_cache_usage_ratio=1.0), llm=rates)
    assert windows.observe(("t", "m"), first, 0.0, 10.0) == [(first.llm_readings, None)]
    assert len(windows.observe(("t", "m"), first, 1.0, 10.0)) == 1
    both = windows.observe(("t", "m"), second, 2.0, 10.0)
    assert both == [(first.llm_readings, None), (second.llm_readings, rates)]
    assert windows.observe(("t", "m"), second, 10.5, 10.0) == [(second.llm_readings, rates)]
    assert windows.observe(("t", "other"), ModelState("other"), 10.5, 10.0) == []


def test_kv_pressure_is_logged_when_it_starts_and_when_it_ends() -> None:
    """One log line as pressure starts (with its numbers), none while it lasts, one as it ends."""
    log, limits = KvPressureLog(), AdvisorThresholds()
    calm = AdvisorInput("t", "m", 0.05, kv_cache_usage_ratio=0.5, requests_waiting=3.0)
    full = AdvisorInput(
        "t", "m", 0.05, kv_cache_usage_ratio=0.96, requests_waiting=3.0, preemptions_per_second=1.5
    )
    with capture_logs() as logs:
        assert [log.update(w, limits) for w in (calm, full, full, calm, calm)] == [
            False,
            True,
            False,
            True,
            False,
        ]
    assert [(e["event"], e["pressure"]) for e in logs] == [
        ("kv_cache_pressure_changed", True),
        ("kv_cache_pressure_changed", False),
    ]
    assert (logs[0]["kv_cache_usage_ratio"], logs[0]["preemptions_per_second"]) == (0.96, 1.5)
    assert logs[0]["requests_waiting"] == 3.0


def _snapshot(p95: float) -> Any:
    from tritonwatch.state.canary_board import SeriesSnapshot

    return SeriesSnapshot("t", "m", "http", {}, (), 0.0, 0, {"5m": {0.95: p95}})


def test_a_streams_whole_length_reaches_no_budget_rule_unless_latency_is_written() -> None:
    """A streamed model's whole-stream p95 (the canary's max_tokens decides it) is no
    evidence for p95-budget advice by default; a written slo.latency makes it one."""
    target_state = _state({"model_transaction_policy": {"decoupled": True}})
    for config, expected in ((_config(), None), (_config(latency={"threshold": "1s"}), 0.2)):
        target = config.targets[0]
        window = advisor_input_for(
            config,
            target,
            target.models[0],
            target_state,
            snapshot=_snapshot(0.2),
            samples=[],
            stream=_stream(0.05, 0.01),
        )
        assert window.streaming
        assert window.p95_seconds == expected
    plain = _config()
    target = plain.targets[0]
    window = advisor_input_for(
        plain, target, target.models[0], _state({}), snapshot=_snapshot(0.2), samples=[]
    )
    assert window.p95_seconds == 0.2
