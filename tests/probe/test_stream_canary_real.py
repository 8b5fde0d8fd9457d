"""The streaming canary against real Triton 2.51: tokens counted, timed from the send,
errors mid-stream, TLS, and a decoupled model with streaming off.

The canary runs through :class:`CanaryRunner`, so the choice of a streaming sender for
a decoupled model (read from its config when the canary is prepared) is exercised, and
the streams go out from the canary engine's thread, in clear and over TLS, as in the
daemon. Its TTFT/ITL side by side with independent
clients is a measurement: test_stream_canary_real_bench.py.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from stream_real_support import MAX_TOKENS, MODEL, RATE, RecordingStreamBoard, stream_plan

from real_triton import RealTriton
from support import wait_until
from tritonwatch.config.canary_schema import StreamConfig
from tritonwatch.probe.runner import CanaryRunner
from tritonwatch.probe.stream.stream_canary import StreamSender
from tritonwatch.records.observations import Outcome
from tritonwatch.state.canary_board import CanaryBoard

pytestmark = pytest.mark.real


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_stream_canary_times_and_counts_every_token(
    fast_stream: RealTriton, protocol: str
) -> None:
    """Breaks if the streaming canary (HTTP SSE or gRPC ModelStreamInfer, sent from the
    engine's thread) miscounts the tokens the model sent, loses a gap between them,
    times the first token from anywhere but the send (the model waits 20 ms before it),
    or leaves a stream out of the TTFT/ITL histograms; or if the canary the runner
    started for the decoupled model is not the one that streams (no swap), with the
    streaming sender its prepare chose and its series declared on the stream board."""
    streams = RecordingStreamBoard()
    runner = CanaryRunner(CanaryBoard(), streams)
    plan = stream_plan(fast_stream, protocol)
    try:
        runner.start([plan])
        started = runner.running()[plan.key]
        wait_until(lambda: len(streams.results) >= 5, 30, "five streams")
        running = runner.running()
    finally:
        runner.stop()
    assert running == {plan.key: started}
    assert isinstance(started.sender, StreamSender)
    results = list(streams.results)
    assert {r.outcome for r in results} == {Outcome.SUCCESS}, {r.error for r in results}
    assert [(r.output_tokens, len(r.gaps_seconds)) for r in results] == [
        (MAX_TOKENS, MAX_TOKENS - 1)
    ] * len(results)
    assert all(r.ttft_seconds is not None and r.ttft_seconds >= 0.020 for r in results)
    assert runner._engine.sent >= len(results)  # streamed from the engine's thread
    [snapshot] = streams.snapshot(time.monotonic())
    assert (snapshot.ttft.count, snapshot.itl.count) == (
        len(results),
        (MAX_TOKENS - 1) * len(results),
    )
    assert snapshot.output_tokens == MAX_TOKENS * len(results)


def test_streaming_off_skips_a_decoupled_model_instead_of_failing_it(
    real_triton: RealTriton,
) -> None:
    """Breaks if ``stream.mode: off`` on a decoupled model sends plain infers that fail
    (Triton refuses them) instead of skipping the canary with a reason."""
    from structlog.testing import capture_logs

    plan = replace(stream_plan(real_triton, "http"), stream=StreamConfig(mode="off"))
    stats, streams = CanaryBoard(), RecordingStreamBoard()
    runner = CanaryRunner(stats, streams)
    with capture_logs() as logs:
        try:
            runner.start([plan])
            skipped = wait_until(stats.skipped, 30, "the canary to be skipped")
            time.sleep(3 / RATE)  # room for requests it should not send
            snapshot = stats.snapshot(time.monotonic())
        finally:
            runner.stop()
    assert skipped == {plan.key: "decoupled model; streaming is off"}
    assert [sum(s.outcomes.values()) for s in snapshot] == [0]
    assert streams.results == []
    said = [(e["event"], e.get("reason")) for e in logs if e["event"].startswith("canary_s")]
    assert said == [("canary_skipped", "decoupled model; streaming is off")], said


def test_a_mid_stream_error_fails_the_request_but_counts_its_tokens(
    real_triton: RealTriton,
) -> None:
    """Breaks if an error after the first tokens (an SSE event under status 200, an
    in-band gRPC error) reads as a success, feeds the TTFT/ITL histograms, or loses the
    tokens the server did send. (Both protocols on one load of the failing model.)"""
    config = real_triton.config(MODEL)
    config["parameters"]["fail_after"] = {"string_value": "2"}
    config["parameters"]["first_token_ms"] = {"string_value": "1"}
    real_triton.load(MODEL, config)
    try:
        for protocol, outcome in (("http", "http_error"), ("grpc", "grpc_error")):
            _fails_mid_stream(real_triton, protocol, outcome)
    finally:
        real_triton.reset(MODEL)


def _fails_mid_stream(server: RealTriton, protocol: str, outcome: str) -> None:
    stats, streams = CanaryBoard(), RecordingStreamBoard()
    runner = CanaryRunner(stats, streams)
    try:
        runner.start([stream_plan(server, protocol)])
        wait_until(lambda: len(streams.results) >= 3, 30, f"three failed {protocol} streams")
    finally:
        runner.stop()
    first = streams.results[:3]
    assert [(r.outcome, r.output_tokens, len(r.gaps_seconds)) for r in first] == [
        (Outcome(outcome), 2, 1)
    ] * 3, [r.error for r in first]
    assert all("fail_after: failure asked for after 2 tokens" in r.error for r in first)
    now = time.monotonic()
    [snapshot] = streams.snapshot(now)
    assert (snapshot.ttft.count, snapshot.itl.count) == (0, 0)
    assert snapshot.output_tokens == 2 * len(streams.results)
    [series] = stats.snapshot(now)
    assert series.outcomes.get(outcome, 0) >= 3 and not series.outcomes.get("success"), protocol


def test_the_http_stream_canary_speaks_mutual_tls(real_triton: RealTriton, tmp_path: Path) -> None:
    """Breaks if the streaming canary's connections skip the target's TLS settings (the
    proxy demands a client certificate, so a stream sent without it never succeeds), or
    if a TLS stream does not go out from the engine (its TLS sockets, engine_tls.py)."""
    from tls_support import TlsProxy, make_pki
    from tritonwatch.common.client_tls import ClientTLS

    pki = make_pki(tmp_path)
    with TlsProxy(real_triton.http_port, pki, mutual=True) as proxy:
        plan = replace(stream_plan(real_triton, "http"), http_url=f"https://{proxy.base}",
                       tls=ClientTLS(pki.ca, pki.client_cert, pki.client_key))  # fmt: skip
        streams = RecordingStreamBoard()
        runner = CanaryRunner(CanaryBoard(), streams)
        try:
            runner.start([plan])
            wait_until(lambda: len(streams.results) >= 3, 30, "three streams over TLS")
        finally:
            runner.stop()
    assert runner._engine.sent >= 3  # every stream went out from the engine, over TLS
    assert [(r.outcome, r.output_tokens) for r in streams.results[:3]] == [
        (Outcome.SUCCESS, MAX_TOKENS)
    ] * 3, [r.error for r in streams.results]
