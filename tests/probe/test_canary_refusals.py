"""A model refusing the canary's input (probe/canary/refusals.py): ``rejected``, a canary
that backs off, a metric and a status line, and never a page."""

from __future__ import annotations

import time
from typing import Any

import pytest

from canary_record_support import with_sender
from tritonwatch.analysis.serving import not_serving
from tritonwatch.analysis.slo import SliSource, SLOKind, SLOSpec
from tritonwatch.export.canary_metrics import CanaryCollector
from tritonwatch.export.status_page import ModelStatus, StatusSnapshot, render_status_page
from tritonwatch.kserve.server_errors import ServerError
from tritonwatch.probe.canary.breaker import BREAKER_FAILURES
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.model_canary import STALL_INTERVALS, ModelCanary
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.canary.refusals import (
    REFUSALS_IN_ROW,
    REFUSED_PROBE_SECONDS,
    RefusalWatch,
    refused_input,
)
from tritonwatch.records.observations import Outcome, ReadinessObservation
from tritonwatch.runtime.slo_event_store import SeriesKey
from tritonwatch.runtime.slo_tracker import SLOTracker
from tritonwatch.state.canary_board import CanaryBoard

KEY = ("t", "m", "http")
TOKENS = "refuses: TOKENS must hold at least 8 token ids in [1000, 2000), got [85]"
UNAVAILABLE = "Request for unknown model: 'm' has no available versions"
PLAN = CanaryPlan(
    "t", "m", "", "http", "http://127.0.0.1:1", "grpc://127.0.0.1:2", 1.0, False, 2.0, 4, "zero"
)


@pytest.mark.parametrize(
    ("error", "protocol", "refused"),
    [
        (ServerError(TOKENS, status="400"), "http", True),
        (ServerError("unexpected shape for input 'x'", status="400"), "http", True),
        (ServerError(TOKENS, status="StatusCode.INVALID_ARGUMENT"), "grpc", True),
        (ServerError("Request for unknown model: 'm' is not found", status="400"), "http", False),
        (ServerError(UNAVAILABLE, status="StatusCode.INVALID_ARGUMENT"), "grpc", False),
        (ServerError("model 'm' is not ready", status="400"), "http", False),
        (ServerError("Request was cancelled", status="400"), "http", False),
        (ServerError("Model version not ready", status="400"), "http", False),
        (ServerError("Request for unknown model", status="404"), "http", False),
        (ServerError("boom", status="500"), "http", False),
        (ServerError(TOKENS, status="StatusCode.INTERNAL"), "grpc", False),
        (ServerError(TOKENS, status="400"), "grpc", False),
        (TimeoutError(), "http", False),
    ],
)
def test_only_a_refused_request_is_rejected(
    error: BaseException, protocol: str, refused: bool
) -> None:
    """Breaks if a 400 / INVALID_ARGUMENT about the request is not the canary's own
    refusal, or one about the model's state (older Tritons answered 400), a 404, a 500
    or a timeout is taken for one."""
    assert refused_input(error, protocol) is refused


def test_five_refusals_in_a_row_back_off_to_one_request_a_minute_until_a_success() -> None:
    """Breaks if the canary backs off before REFUSALS_IN_ROW refusals, sends more than
    one request per REFUSED_PROBE_SECONDS while backed off, or stays backed off after a
    success; the board holds Triton's text meanwhile."""
    board = CanaryBoard()
    board.declare([KEY])
    watch = RefusalWatch(board, KEY)
    for n in range(REFUSALS_IN_ROW - 1):
        watch.record(Outcome.REJECTED, TOKENS, float(n))
    assert not watch.refusing and watch.allows(4.0)
    watch.record(Outcome.REJECTED, TOKENS, 4.0)
    assert watch.refusing and board.input_refused() == {KEY: TOKENS}
    allowed = [watch.allows(t) for t in (5.0, 63.9, 64.0, 64.5, 123.9, 124.0)]
    assert allowed == [False, False, True, False, False, True]
    watch.record(Outcome.TIMEOUT, "", 125.0)  # the server's failure: not a success
    assert watch.refusing
    watch.record(Outcome.SUCCESS, "", 184.0)
    assert not watch.refusing and board.input_refused() == {}
    assert watch.allows(184.5)


def test_a_refusal_run_broken_by_a_success_starts_over() -> None:
    """Breaks if refusals that are not in a row add up to a back-off."""
    board = CanaryBoard()
    watch = RefusalWatch(board, KEY)
    for n in range(3 * REFUSALS_IN_ROW):
        watch.record(Outcome.SUCCESS if n % REFUSALS_IN_ROW == 0 else Outcome.REJECTED, "x", n)
    assert not watch.refusing


def _refusing_canary() -> tuple[ModelCanary, CanaryBoard, float]:
    board = CanaryBoard()
    board.declare([KEY])
    canary = ModelCanary(PLAN, _NoClient(), board, engine=CanaryEngine())  # type: ignore[arg-type]
    with_sender(canary)  # (its client never asked: the refusals alone decide)
    now = time.monotonic()
    for n in range(REFUSALS_IN_ROW):
        canary.record(now + n, ServerError(TOKENS, status="400"))
    return canary, board, now


class _NoClient:
    protocol = "http"

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the canary asked its client for {name}")


def test_a_refusing_model_is_rejected_not_failed_and_never_pages() -> None:
    """Breaks if refused requests count against availability, extend a not-serving run,
    trip the circuit breaker, or leave the canary sending at its full rate."""
    canary, board, now = _refusing_canary()
    assert REFUSALS_IN_ROW >= BREAKER_FAILURES  # the breaker would have opened by now
    (snap,) = board.snapshot(now + 10)
    assert snap.outcomes[Outcome.REJECTED] == REFUSALS_IN_ROW
    assert snap.failing_since is None and snap.latency_count == 0
    assert snap.input_refused == f"[400] {TOKENS}"
    assert not canary.breaker_open
    ready = {"t": ReadinessObservation("t", now, Outcome.SUCCESS, True, 0.001)}
    assert not_serving([snap], ready, now + 3600) == []
    spec = SLOSpec("t", "m", SLOKind.AVAILABILITY, 0.999, 28 * 86400.0)
    tracker = SLOTracker([spec])
    tracker.observe_canary(board.snapshot(now + 10), board.buckets, at=1_700_000_000.0)
    key = SeriesKey("t", "m", SLOKind.AVAILABILITY, SliSource.CANARY)
    assert tracker.store.counts(key, 300, 1_700_000_000.0).total == 0
    later = time.monotonic() + 1
    assert not canary.may_send(later)
    assert canary.may_send(later + REFUSED_PROBE_SECONDS)
    assert canary.silence_allowed() == STALL_INTERVALS * REFUSED_PROBE_SECONDS + PLAN.timeout


def test_the_refusal_is_exported_and_shown_with_tritons_text() -> None:
    """Breaks if /metrics lacks tritonwatch_canary_input_refused 1 for the refusing
    canary (0 for another), or the status page does not say to give canary.input_data
    with Triton's error."""
    _, board, now = _refusing_canary()
    other = ("t", "n", "http")
    board.declare([KEY, other])
    families = {f.name: f for f in CanaryCollector(board, clock=lambda: now).collect()}
    samples = {
        s.labels["model"]: s.value for s in families["tritonwatch_canary_input_refused"].samples
    }
    assert samples == {"m": 1.0, "n": 0.0}
    refused = board.snapshot(now)[0].input_refused
    row = ModelStatus("t", "m", "http", True, 0.05, {}, {"rejected": 5}, input_refused=refused)
    page = render_status_page(StatusSnapshot([row]))
    assert "the model refuses the canary's input: give <code>canary.input_data</code>" in page
    assert f'<code class="error">[400] {TOKENS}</code>' in page
