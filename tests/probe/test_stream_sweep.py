"""The streaming sweep on the simulator's LLM model: TTFT, ITL and tokens/s per level over
generate_stream, gRPC ModelStreamInfer and OpenAI; the budget on the chosen measure; the
CLI's runner choice; scheduled sweeps skipping a decoupled model."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from structlog.testing import capture_logs

from sim_process import SimProcess
from tritonwatch.analysis.sweep_verdict import judge_sweep
from tritonwatch.commands.cli import build_parser
from tritonwatch.commands.sweep_cli import settings_from, streaming_settings
from tritonwatch.config.canary_schema import StreamConfig
from tritonwatch.records.sweep_records import StepResult, SweepBoard, SweepProtocol, SweepSettings
from tritonwatch.runtime.scheduled_sweeps import run_scheduled_sweep
from tritonwatch.sim.models import ModelSet, parse_model_set
from tritonwatch.sweep.schedule import SweepPlan
from tritonwatch.sweep.stream_sweep import StreamSweepRunner, is_streaming

pytestmark = pytest.mark.sim

MAX_TOKENS = 8
DECODE_STEP_S = 0.002
"""The simulated model's decode step: no gap between two tokens can be shorter."""


def _models() -> ModelSet:
    """An LLM ``trt`` (2 ms decode steps, cheap prefill) and the plain ``text`` model."""
    llm = {"backend": "tensorrt_llm", "prefill_per_token": "5us", "decode_step_base": "2ms",
           "decode_step_per_seq": "20us"}  # fmt: skip
    return parse_model_set({
        "gpus": [{"uuid": "GPU-11111111-0000-4000-8000-000000000000"}],
        "models": [
            {"name": "trt", "max_batch_size": 0, "llm": llm},
            {"name": "text", "max_batch_size": 0, "compute": "identity",
             "input": [{"name": "INPUT0", "data_type": "TYPE_STRING", "dims": [1]}],
             "output": [{"name": "OUTPUT0", "data_type": "TYPE_STRING", "dims": [1]}]},
        ],
    })  # fmt: skip


@pytest.fixture(scope="module")
def llm_sim() -> Iterator[SimProcess]:
    with SimProcess(models=_models(), seed=0) as process:
        yield process


def _settings(url: str, protocol: SweepProtocol = "http", **changes: Any) -> SweepSettings:
    settings = SweepSettings(
        url=url, model="trt", levels=(1, 4), protocol=protocol,
        measure="ttft", window_seconds=0.3, max_windows=3, timeout=10.0,
        stream=StreamConfig(max_tokens=MAX_TOKENS, prompt_words=4),
    )  # fmt: skip
    return replace(settings, **changes)


def _assert_consistent(step: StepResult) -> None:
    """Every stream of the step succeeded and its numbers agree with each other."""
    assert step.requests > 0 and step.errors == 0
    assert step.ttft is not None and step.itl is not None and step.itl_per_request is not None
    assert step.output_tokens_per_second == pytest.approx(step.requests_per_second * MAX_TOKENS)
    assert step.throughput == step.output_tokens_per_second
    assert 0 < step.ttft["p50"] <= step.ttft["p95"] <= step.ttft["p99"]
    assert step.ttft["p50"] < step.latency["p50"]  # the first token comes before the last
    assert step.itl["p50"] >= DECODE_STEP_S * 0.5  # reads that arrive together share a stamp
    assert step.itl_per_request["p50"] >= DECODE_STEP_S * 0.5
    assert len(step.window_throughputs) == min(step.windows, 3)
    assert all(value > 0 for value in step.window_throughputs)


def test_http_sweep_measures_ttft_itl_and_tokens_per_level(llm_sim: SimProcess) -> None:
    """Breaks if the generate_stream sweep loses a level's TTFT/ITL, miscounts tokens/s or
    judges the knee on requests instead of output tokens."""
    result = judge_sweep(StreamSweepRunner(_settings(llm_sim.http_url)).run())
    assert [step.level for step in result.steps] == [1, 4]
    for step in result.steps:
        _assert_consistent(step)
        assert step.server is not None and step.server.requests > 0  # the statistics API
        assert step.windows <= 3
    assert result.knee is not None
    assert result.knee.throughput in {step.output_tokens_per_second for step in result.steps}


def test_grpc_sweep_keeps_concurrent_streams_on_one_call(llm_sim: SimProcess) -> None:
    """Breaks if concurrent ModelStreamInfer writes fail (grpc.aio allows one in flight) or
    gRPC pieces are timed differently from HTTP's."""
    settings = _settings(f"grpc://{llm_sim.grpc_url}", "grpc", measure="itl")
    steps = StreamSweepRunner(settings).run().steps
    assert [step.level for step in steps] == [1, 4]
    for step in steps:  # the call carries on from one level's streams to the next's
        _assert_consistent(step)


def test_openai_sweep_counts_the_usage_tokens(llm_sim: SimProcess) -> None:
    """Breaks if the OpenAI sweep loses the usage count or asks the KServe API for a
    config or statistics the server need not have."""
    settings = _settings(llm_sim.http_url, "openai", levels=(2,))
    assert is_streaming(settings)
    (step,) = StreamSweepRunner(settings).run().steps
    _assert_consistent(step)
    assert step.server is None


def test_the_budget_stops_the_sweep_on_the_chosen_measure(llm_sim: SimProcess) -> None:
    """Breaks if the budget is judged on another measure than --measure, or the sweep
    goes on past a level over it."""
    settings = _settings(llm_sim.http_url, levels=(1, 2), measure="itl", budget_p95=1e-6)
    measured = StreamSweepRunner(settings).run()
    assert measured.stopped_at_budget
    assert [step.level for step in measured.steps] == [1]
    result = judge_sweep(measured)
    assert result.operating_point is None


def test_a_decoupled_model_is_streamed_and_a_plain_one_is_not(llm_sim: SimProcess) -> None:
    """Breaks if the CLI sends a decoupled model plain infers, streams a plain model, or
    takes --measure for a model that does not stream."""
    parser = build_parser()

    def chosen(*flags: str) -> tuple[SweepSettings | None, str | None]:
        args = parser.parse_args(["sweep", "--url", llm_sim.http_url, *flags])
        return streaming_settings(args, settings_from(args))

    streamed, _ = chosen("--model", "trt", "--max-tokens", "5")
    assert streamed is not None
    assert (streamed.measure, streamed.stream.max_tokens) == ("ttft", 5)
    itl, _ = chosen("--model", "trt", "--measure", "itl")
    assert itl is not None and itl.measure == "itl"
    plain, _ = chosen("--model", "text")
    assert plain is not None and plain.measure == "latency"
    refused, why = chosen("--model", "text", "--measure", "itl")
    assert refused is None and why is not None and "streaming model" in why
    rate, why = chosen("--model", "trt", "--request-rate", "5,10")
    assert rate is None and why is not None and "--concurrency" in why


def test_the_runner_refuses_rates_and_the_plain_measure() -> None:
    """Breaks if a streaming sweep silently runs open-loop or judges whole-stream latency."""
    settings = _settings("http://127.0.0.1:1")
    with pytest.raises(ValueError, match="request rates"):
        StreamSweepRunner(replace(settings, mode="rate"))
    with pytest.raises(ValueError, match="ttft or itl"):
        StreamSweepRunner(replace(settings, measure="latency"))


def test_a_scheduled_sweep_skips_a_decoupled_model(llm_sim: SimProcess) -> None:
    """Breaks if the daemon's scheduled sweep sends a decoupled model plain infers (or
    pauses its canary) instead of skipping it with one log line."""
    paused: list[tuple[str, str, bool]] = []
    board = SweepBoard()
    plain = SweepSettings(url=llm_sim.http_url, model="trt", levels=(1,), window_seconds=0.2)
    plan = SweepPlan("lab", "trt", 3600.0, plain)
    with capture_logs() as logs:
        run_scheduled_sweep(
            plan, board, lambda *call: paused.append(call), threading.Event(), lambda: 0.0
        )
    assert paused == []
    assert board.snapshot() == {}
    (line,) = [entry for entry in logs if entry["event"] == "sweep_skipped_streaming"]
    assert (line["target"], line["model"]) == ("lab", "trt")
    assert "tritonwatch sweep" in line["reason"]
