"""The canary against the simulator, through the real tritonclient (HTTP and gRPC)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from support import assert_within_smoke_bound, wait_until
from tritonwatch.config.canary_schema import InputOverride
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.runner import CanaryRunner
from tritonwatch.sim.server import Simulator
from tritonwatch.state.canary_board import CanaryBoard, SeriesSnapshot, latency_buckets

pytestmark = pytest.mark.sim


def _plan(
    sim: Simulator, model: str = "simple", protocol: str = "http", **changes: object
) -> CanaryPlan:
    fields: dict[str, object] = {
        "target": "sim",
        "model": model,
        "version": "",
        "protocol": protocol,
        "http_url": sim.http_url,
        "grpc_url": f"grpc://{sim.grpc_url}",
        "rate": 20.0,
        "poisson": False,
        "timeout": 2.0,
        "max_in_flight": 8,
        "data": "random",
    }
    fields.update(changes)
    return CanaryPlan(**fields)  # type: ignore[arg-type]


@pytest.fixture
def runner() -> Iterator[CanaryRunner]:
    runner = CanaryRunner(CanaryBoard(latency_buckets([0.05])))
    yield runner
    runner.stop()


def _series(runner: CanaryRunner, model: str = "simple") -> SeriesSnapshot:
    for snap in runner.board.snapshot(time.monotonic()):
        if snap.model == model:
            return snap
    raise AssertionError(f"no series for {model}")


def _wait_for(
    runner: CanaryRunner, outcome: str, count: int, model: str = "simple"
) -> SeriesSnapshot:
    wait_until(
        lambda: _series(runner, model).outcomes[outcome] >= count,
        timeout=15,
        what=f"{count} canary {outcome} results for {model}",
    )
    return _series(runner, model)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_canary_succeeds_and_fills_histogram_and_windows(
    runner: CanaryRunner, protocol: str
) -> None:
    """Canary successes fill the histogram (SLO bound a bucket) and plausible window quantiles."""
    with Simulator() as sim:
        runner.start([_plan(sim, protocol=protocol)])
        snap = _wait_for(runner, "success", 10)
    assert snap.protocol == protocol
    assert sum(v for k, v in snap.outcomes.items() if k != "success") == 0
    assert snap.latency_count >= 10
    assert snap.bucket_counts[-1] == snap.latency_count  # +Inf holds everything
    assert 0.05 in runner.board.buckets
    one_minute = snap.window_quantiles["1m"]
    assert set(one_minute) == {0.5, 0.9, 0.95, 0.99}
    assert 0.0005 < one_minute[0.5] < 0.1  # ~1 ms model plus client and loopback time


def test_a_one_second_hang_shows_in_p99(runner: CanaryRunner) -> None:
    """A 1 s server hang under a 5 s timeout shows in the 1-minute p99, not as timeouts."""
    with Simulator() as sim:
        runner.start([_plan(sim, rate=10.0, timeout=5.0)])
        before = _wait_for(runner, "success", 5).outcomes["success"]
        sim.inject_fault(kind="hang", duration_s=1.0)
        # Ten more: the requests the hang held (a lower bound on their latency: a slow
        # host only adds), and some after it.
        snap = _wait_for(runner, "success", before + 10)
    assert snap.window_quantiles["1m"][0.99] >= 0.85  # sent within 0.1 s of it starting
    assert snap.outcomes["timeout"] == 0


def test_requests_past_their_timeout_are_timeouts(runner: CanaryRunner) -> None:
    """Requests past their timeout count as timeouts, observed at the timeout's bucket."""
    with Simulator() as sim:
        sim.inject_fault(kind="hang")
        runner.start([_plan(sim, rate=10.0, timeout=0.3, max_in_flight=2)])
        snap = _wait_for(runner, "timeout", 5)
        sim.clear_faults()
    assert snap.outcomes["success"] == 0
    timeout_bucket = latency_buckets([0.05]).index(0.5)  # 0.3 s lands in le=0.5
    assert snap.bucket_counts[timeout_bucket] >= 5
    assert snap.bucket_counts[timeout_bucket - 1] == 0


@pytest.mark.parametrize(("protocol", "outcome"), [("http", "http_error"), ("grpc", "grpc_error")])
def test_server_errors_are_protocol_errors(
    runner: CanaryRunner, protocol: str, outcome: str
) -> None:
    """A server's error answers count as http_error or grpc_error, never as successes."""
    with Simulator() as sim:
        sim.inject_fault(kind="error_burst", reason="BACKEND")
        runner.start([_plan(sim, protocol=protocol)])
        snap = _wait_for(runner, outcome, 3)
    assert snap.outcomes["success"] == 0


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_refused_connections_are_connection_errors(runner: CanaryRunner, protocol: str) -> None:
    """A server going away under a running canary gives connection errors, not a crash."""
    with Simulator() as sim:
        runner.start([_plan(sim, protocol=protocol, rate=10.0)])
        _wait_for(runner, "success", 2)
        sim.stop()  # the server goes away under the running canary
        snap = _wait_for(runner, "connection_error", 3)
    assert snap.outcomes["timeout"] + snap.outcomes["connection_error"] >= 3


def test_a_model_it_cannot_fill_is_reported_and_the_others_run(runner: CanaryRunner) -> None:
    """A model whose inputs cannot be built is skipped with its reason; the others still run."""
    wrong = {"PROMPT": InputOverride(shape=(1, 1))}  # an input text_identity does not have
    with Simulator() as sim, capture_logs() as logs:
        runner.start([_plan(sim, model="text_identity", inputs=wrong), _plan(sim, model="simple")])
        _wait_for(runner, "success", 3, model="simple")
    errors = [log for log in logs if log["event"] == "canary_skipped"]
    assert len(errors) == 1
    assert errors[0]["model"] == "text_identity"
    assert errors[0]["reason"].startswith("input 'PROMPT': no such input")
    assert sum(_series(runner, "text_identity").outcomes.values()) == 0
    assert runner.board.skipped() == {("sim", "text_identity", "http"): errors[0]["reason"]}


def test_a_hanging_target_never_delays_another(runner: CanaryRunner, hanging_endpoint: str) -> None:
    """One target accepts connections and never answers; the other's canary keeps its rate."""
    with Simulator() as sim:
        stuck = _plan(sim, model="simple", rate=10.0, timeout=0.5)
        stuck = CanaryPlan(**{**{f: getattr(stuck, f) for f in stuck.__dataclass_fields__},
                              "target": "stuck", "http_url": hanging_endpoint})  # fmt: skip
        runner.start([stuck, _plan(sim, rate=20.0)])
        started = time.monotonic()
        snap = _wait_for(runner, "success", 30)
        elapsed = time.monotonic() - started
    # 30 successes at 20/s: 1.5 s, not held up by the stuck target's 0.5 s timeouts.
    assert_within_smoke_bound(elapsed, 1.5, "30 canary successes beside a hanging target")
    now = time.monotonic()
    stuck_series = next(s for s in runner.board.snapshot(now) if s.target == "stuck")
    assert stuck_series.outcomes["success"] == 0
    assert snap.outcomes["timeout"] == 0
