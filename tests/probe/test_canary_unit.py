"""Canary behaviour that needs a misbehaving server no real one reproduces on demand:
each request's end handed to ``canary.record`` as the engine (a raw answer, or the
exception the request failed with) or the library path (its own timeout) hands it."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from structlog.testing import capture_logs

from canary_record_support import (
    WAIT,
    ScriptedApi,
    http_answer,
    library_answers,
    prepared,
    scripted_client,
    total_outcomes,
    until,
)
from tritonwatch.probe.canary import library_path
from tritonwatch.probe.canary.model_canary import ModelCanary
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.records.observations import Outcome
from tritonwatch.state.canary_board import CanaryBoard
from tritonwatch.wire.limits import HttpRequest

PLAN = CanaryPlan(
    "t", "m", "", "http", "http://127.0.0.1:1", "grpc://127.0.0.1:2", 1.0, False, 1.0, 4, "zero"
)
BINARY_HEADER = b"Inference-Header-Content-Length: "
"""What a request with binary tensors carries (and a JSON one does not)."""


def _board(plan: CanaryPlan = PLAN) -> CanaryBoard:
    stats = CanaryBoard(wall_clock=lambda: 1_700_000_000.0)
    stats.declare([plan.key])
    return stats


def _recorded(
    answers: list[Any], api: ScriptedApi | None = None
) -> tuple[CanaryBoard, ModelCanary]:
    """A prepared canary's board after ``answers`` were recorded, one request each."""
    stats = _board()

    async def go() -> ModelCanary:
        canary = await prepared(PLAN, scripted_client(PLAN, api), stats)
        for answer in answers:
            now = time.monotonic()
            canary.record(now, answer, now)
        return canary

    return stats, asyncio.run(go())


def _engine_request(canary: ModelCanary) -> bytes:
    assert canary.sender is not None
    found = canary.sender.engine_request()
    assert found is not None
    request, _endpoint = found
    assert isinstance(request, HttpRequest)
    return request.data


def test_a_response_missing_an_output_is_a_bad_response() -> None:
    """Breaks if an answer lacking the model's output is counted as anything but bad_response."""
    stats, _ = _recorded([http_answer(b'{"outputs": []}')])
    assert stats.snapshot(0)[0].outcomes[Outcome.BAD_RESPONSE] == 1


def test_complete_response_is_a_success() -> None:
    """Breaks if an answer holding every output is not counted as a success."""
    stats, _ = _recorded([http_answer()])
    assert stats.snapshot(0)[0].outcomes[Outcome.SUCCESS] == 1


@pytest.mark.parametrize("status", [400, 415, 422, 500])
def test_an_http_error_never_switches_the_tensor_format(status: int) -> None:
    """Breaks if error codes are read as "binary refused" again: the format comes from
    GET /v2, and MLServer's 500 to a binary body looks like any failing model's. (A 400
    is the request refused: ``rejected``, probe/canary/refusals.py.)"""
    stats, canary = _recorded([http_answer(b'{"error": "boom"}', status), http_answer()])
    assert canary.sender is not None and canary.sender.tensor_format == "binary"
    assert BINARY_HEADER in _engine_request(canary)  # what the engine sends after them
    snap = stats.snapshot(0)[0]
    failed = Outcome.REJECTED if status == 400 else Outcome.HTTP_ERROR
    assert (snap.outcomes[failed], snap.outcomes[Outcome.SUCCESS]) == (1, 1)
    assert snap.latency_count == 1  # an error is no latency sample


def test_a_server_without_the_extension_gets_json_tensors() -> None:
    """Breaks if a KServe v2 server whose GET /v2 lacks binary_tensor_data gets binary,
    from the engine or through the library path."""
    client = scripted_client(PLAN, ScriptedApi(extensions=frozenset({"statistics"})))
    made = library_answers(client, lambda _timeout: None)

    async def go() -> ModelCanary:
        canary = await prepared(PLAN, client, _board())
        assert canary.sender is not None and canary.sender.library is not None
        canary.sender.library.call()
        return canary

    canary = asyncio.run(go())
    assert canary.sender is not None and canary.sender.tensor_format == "json"
    for request in (_engine_request(canary), *made):
        assert BINARY_HEADER not in request
        assert b"Content-Type: application/json" in request
    assert len(made) == 1


def test_a_failure_is_logged_with_its_reason_and_kept_as_the_last_error() -> None:
    """Breaks if an HTTP failure is counted without a line saying why, or the stats
    forget it once the next request succeeds."""
    crashed = http_answer(b'{"error": "model \'m\' crashed: CUDA out of memory"}', 500)
    with capture_logs() as logs:
        stats, _ = _recorded([crashed, http_answer()])
    (line,) = [log for log in logs if log["event"] == "canary_request_failed"]
    assert line == {
        "event": "canary_request_failed",
        "log_level": "warning",
        "component": "canary",
        "target": "t",
        "model": "m",
        "protocol": "http",
        "outcome": "http_error",
        "error": "[500] model 'm' crashed: CUDA out of memory",
        "status": 500,
    }
    last = stats.snapshot(0)[0].last_error
    assert last is not None
    assert (last.outcome, last.error) == ("http_error", line["error"])
    assert last.wall_time == 1_700_000_000.0


def test_a_timeout_is_logged_with_a_reason_not_an_empty_string() -> None:
    """Breaks if a timed-out request's error text is str(TimeoutError()): empty (the
    library path's timeout raises a bare one)."""
    plan = replace(PLAN, timeout=0.05)
    stats = _board(plan)
    client = scripted_client(plan)
    release = threading.Event()

    def never_answers(_timeout: float) -> Any:
        release.wait(WAIT)  # (released once the canary has timed it out)
        raise ConnectionError("released")

    library_answers(client, never_answers)

    async def go() -> None:
        canary = await prepared(plan, client, stats)
        assert canary.sender is not None and canary.sender.library is not None
        loop = asyncio.get_running_loop()
        serving = asyncio.create_task(
            library_path.serve(
                canary.sender.library, canary, loop.time(), timeout=0.05, max_in_flight=1
            )
        )
        try:
            await until(lambda: total_outcomes(stats) >= 1, "the timeout")
        finally:
            serving.cancel()
            release.set()
            await asyncio.gather(serving, return_exceptions=True)

    with capture_logs() as logs:
        asyncio.run(go())
    (line,) = [log for log in logs if log["event"] == "canary_request_failed"]
    assert (line["outcome"], line["error"]) == (
        "timeout",
        "no answer within 0.05 s (canary timeout)",
    )
    assert "status" not in line
    snap = stats.snapshot(0)[0]
    assert snap.outcomes[Outcome.TIMEOUT] == 1
    assert snap.last_error is not None
    assert snap.last_error.error == line["error"]


def test_refused_connections_are_counted_and_kept_but_not_logged_each() -> None:
    """Breaks if a server that is down floods the log (readiness and the breaker say so)."""
    with capture_logs() as logs:
        stats, _ = _recorded([ConnectionRefusedError(111, "Connection refused")] * 4)
    assert not [log for log in logs if log["event"] == "canary_request_failed"]
    snap = stats.snapshot(0)[0]
    assert snap.outcomes[Outcome.CONNECTION_ERROR] == 4
    assert snap.last_error is not None
    assert snap.last_error.error == "[Errno 111] Connection refused"


def test_consecutive_failures_open_the_circuit_and_a_success_closes_it() -> None:
    """After 5 failures the canary sends only a probe every 10 s; one success closes it."""
    from tritonwatch.probe.canary.breaker import BREAKER_PROBE_SECONDS

    stats = CanaryBoard()
    stats.declare([PLAN.key])

    async def go() -> tuple[list[bool], set[tuple[str, str, str]]]:
        canary = await prepared(PLAN, scripted_client(PLAN), stats)
        for _ in range(5):
            now = time.monotonic()
            canary.record(now, ConnectionRefusedError("refused"), now)
        now = time.monotonic()
        gates = [canary.may_send(now), canary.may_send(now + BREAKER_PROBE_SECONDS)]
        opened = stats.open_circuits()
        canary.record(now + BREAKER_PROBE_SECONDS, http_answer())  # the probe succeeds
        gates.append(canary._gates.breaker.allows(time.monotonic()))
        return gates, opened

    gates, opened = asyncio.run(go())
    assert opened == {PLAN.key}
    assert gates == [False, True, True]  # held back, then a probe, then closed again
    assert stats.open_circuits() == set()
    assert stats.snapshot(0)[0].outcomes[Outcome.CONNECTION_ERROR] == 5


def test_canaries_are_capped_per_target_whatever_the_config_asks() -> None:
    """Breaks if a target's canaries together may exceed 50/s or 64 in flight, if the
    cap scales a target it should not touch, or if it stops being logged."""
    from structlog.testing import capture_logs

    from tritonwatch.config import parse_config
    from tritonwatch.probe.canary.plans import canary_plans

    config = parse_config(
        "canary: {rate: 100/s, max_in_flight: 100, timeout: 500ms}\n"
        "slo: {latency: {threshold: 100ms}}\n"
        "targets:\n"
        "  - {name: a, url: http://127.0.0.1:1, models: [{name: m1}, {name: m2}]}\n"
        "  - {name: b, url: http://127.0.0.1:2, models: [{name: m3, canary: {rate: 2/s}}]}\n"
        "  - {name: c, url: http://127.0.0.1:3,"
        " models: [{name: m4, canary: {rate: 3/s, max_in_flight: 10}}]}\n",
        "caps.yaml",
    )
    with capture_logs() as logs:
        plans = {plan.model: plan for plan in canary_plans(config)}
    # Worked out by hand from the caps (50/s, 64 in flight per target):
    # a asks 2 x 100/s and 2 x 100 in flight: each model gets its share, 25/s and 32;
    # b asks 2/s (under the cap, kept) and 100 in flight: held to 64;
    # c asks 3/s and 10 in flight, both under the caps: left alone.
    assert {m: (p.rate, p.max_in_flight) for m, p in plans.items()} == {
        "m1": (25.0, 32),
        "m2": (25.0, 32),
        "m3": (2.0, 64),
        "m4": (3.0, 10),
    }
    assert [log["target"] for log in logs if log["event"] == "canary_capped"] == ["a", "b"]


def test_plans_carry_the_stream_settings_and_the_openai_endpoint() -> None:
    """Breaks if canary.stream, targets[].openai_url or models[].served_name stop reaching
    the streaming canary (an openai canary would then have nowhere to send)."""
    from tritonwatch.config import parse_config
    from tritonwatch.config.canary_schema import Range
    from tritonwatch.probe.canary.plans import canary_plans

    config = parse_config(
        "targets:\n"
        "  - {name: v, url: http://127.0.0.1:1, openai_url: http://127.0.0.1:9,"
        " models: [{name: llama, served_name: meta/llama, canary: {protocol: openai,"
        " stream: {max_tokens: {min: 4, max: 8}, timeout: 12s}}}, {name: plain}]}\n",
        "openai.yaml",
    )
    plans = {plan.model: plan for plan in canary_plans(config)}
    llama, plain = plans["llama"], plans["plain"]
    assert (llama.protocol, llama.openai_url, llama.served_name) == (
        "openai", "http://127.0.0.1:9", "meta/llama")  # fmt: skip
    assert (llama.stream.max_tokens, llama.stream.timeout) == (Range(min=4, max=8), 12.0)
    assert (plain.protocol, plain.served_name, plain.stream.mode) == ("http", None, "auto")


def test_the_breaker_opens_at_the_fifth_failure_in_a_row_and_says_so_once() -> None:
    """Breaks if the breaker opens before BREAKER_FAILURES failures or after, reports the
    opening more than once, or stops counting."""
    from tritonwatch.probe.canary.breaker import BREAKER_FAILURES, BreakerChange, CircuitBreaker

    breaker = CircuitBreaker()
    assert BREAKER_FAILURES == 5
    changes = [breaker.record(Outcome.TIMEOUT, 100.0 + n) for n in range(4)]
    assert (changes, breaker.failures, breaker.is_open) == ([None] * 4, 4, False)
    assert breaker.record(Outcome.CONNECTION_ERROR, 104.0) is BreakerChange.OPENED
    assert (breaker.failures, breaker.is_open) == (5, True)
    assert breaker.record(Outcome.TIMEOUT, 105.0) is None  # already open
    assert (breaker.failures, breaker.is_open) == (6, True)


def test_an_open_breaker_lets_one_probe_through_per_period_from_its_opening() -> None:
    """Breaks if an open breaker sends before BREAKER_PROBE_SECONDS have passed since it
    opened (or since the last probe), holds a probe that is due, or lets two through."""
    from tritonwatch.probe.canary.breaker import BREAKER_PROBE_SECONDS, CircuitBreaker

    breaker = CircuitBreaker()
    assert breaker.allows(0.0)  # closed: every send
    for _ in range(5):
        breaker.record(Outcome.TIMEOUT, 100.0)
    assert BREAKER_PROBE_SECONDS == 10.0
    assert [breaker.allows(at) for at in (100.0, 109.99, 110.0, 110.0, 119.99, 120.0)] == [
        False,
        False,
        True,  # the first probe, exactly a period after the opening
        False,  # one probe per period
        False,
        True,
    ]


@pytest.mark.parametrize(
    "answer",
    [
        Outcome.SUCCESS,
        Outcome.BAD_RESPONSE,
        Outcome.CLIENT_ERROR,
        Outcome.TOO_LARGE,
        Outcome.REJECTED,
    ],
)
def test_any_answer_closes_the_breaker_and_starts_the_count_over(answer: Outcome) -> None:
    """Breaks if an answer of any kind (the server is there) leaves the breaker open, keeps
    the failures counted before it, trips the breaker itself, or reports a closing that
    did not happen."""
    from tritonwatch.probe.canary.breaker import BreakerChange, CircuitBreaker

    breaker = CircuitBreaker()
    for _ in range(4):
        breaker.record(Outcome.HTTP_ERROR, 1.0)
    assert breaker.record(answer, 2.0) is None  # closed already: nothing changed
    assert breaker.failures == 0
    for _ in range(4):
        breaker.record(Outcome.HTTP_ERROR, 3.0)
    assert not breaker.is_open  # four since the answer, not eight
    breaker.record(Outcome.HTTP_ERROR, 4.0)
    assert breaker.is_open
    assert breaker.record(answer, 5.0) is BreakerChange.CLOSED
    assert (breaker.failures, breaker.is_open, breaker.allows(5.0)) == (0, False, True)
    assert [breaker.record(answer, 6.0 + n) for n in range(6)] == [None] * 6
    assert not breaker.is_open
