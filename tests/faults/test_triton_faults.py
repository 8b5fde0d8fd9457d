"""Triton misbehaving under a real ``tritonwatch run``: unreachable at start, killed and
back, hanging, slow, garbage and oversized ``/metrics``.

Each test checks that the daemon keeps serving ``/metrics`` throughout (a recorder reads
it every 100 ms), reports the fault in its own metrics and log lines, loses nothing
(counters only grow, rates are never negative) and recovers by itself once Triton
behaves: ``tritonwatch_up`` and the scrape on the first scrape after its return (at
most the one already under way fails), timed only by a 5x smoke bound on the interval.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults_support import (
    GARBAGE_TEXT,
    MetricsFront,
    MetricsRecorder,
    all_sample_values,
    connections_to,
    counter_total,
    metric,
    metric_at_least,
    open_fds,
    port_of,
    thread_count,
)

from sim_process import SimProcess
from support import (
    DaemonProcess,
    assert_within_smoke_bound,
    free_port,
    http_get,
    sample_value,
    wait_until,
)
from tritonwatch.probe.canary.breaker import BREAKER_PROBE_SECONDS
from tritonwatch.sim.server import Simulator

pytestmark = pytest.mark.real

INTERVAL_S = 1.0
"""The scrape (and readiness) interval of every test here."""
MAX_IN_FLIGHT = 2
TARGET = {"target": "sim"}
METRICS = {"target": "sim", "source": "metrics"}


def _config(
    path: Path,
    http_url: str,
    metrics_url: str | None = None,
    *,
    max_body_bytes: int | None = None,
    canary_rate: str = "10/s",
) -> Path:
    cap = f", max_body_bytes: {max_body_bytes}" if max_body_bytes else ""
    metrics = f"    metrics_url: '{metrics_url}'\n" if metrics_url else ""
    path.write_text(
        f"scrape: {{interval: {INTERVAL_S}s, timeout: 500ms{cap}}}\n"
        f"canary: {{rate: {canary_rate}, timeout: 300ms, max_in_flight: {MAX_IN_FLIGHT}}}\n"
        "nvml: {enabled: false}\n"
        "targets:\n"
        f"  - name: sim\n    url: '{http_url}'\n{metrics}"
        "    models: [{name: simple}]\n"
    )
    return path


def _canary(daemon: DaemonProcess, outcome: str) -> float:
    return counter_total(
        daemon.metrics(), "tritonwatch_canary_requests_total", model="simple", outcome=outcome
    )


def _serving(daemon: DaemonProcess) -> bool:
    """Ready and scraped: what recovery means for the Triton side of the daemon."""
    text = daemon.metrics()
    return (
        sample_value(text, "tritonwatch_up", list(TARGET.items())) == 1
        and sample_value(text, "tritonwatch_scrape_success", list(METRICS.items())) == 1
    )


def _scrape_failures(daemon: DaemonProcess) -> float:
    return counter_total(daemon.metrics(), "tritonwatch_scrape_failures_total", **METRICS)


def _assert_recovers(daemon: DaemonProcess) -> None:
    """Called once the target behaves again: the daemon sees it up and scraped on its
    next scrape, with at most the one scrape already under way failing after it."""
    back_at = time.monotonic()
    failed = _scrape_failures(daemon)
    wait_until(lambda: _serving(daemon), 15, "the target up and scraped again", every=0.05)
    recovery_s = time.monotonic() - back_at
    assert _scrape_failures(daemon) <= failed + 1
    assert_within_smoke_bound(recovery_s, INTERVAL_S, "recovery once the target behaves")


def _rates_present(daemon: DaemonProcess) -> bool:
    value = metric(daemon, "tritonwatch_model_requests_per_second", target="sim", model="simple")
    return value is not None and value > 0


def _check_recording(recorder: MetricsRecorder) -> None:
    """/metrics answered 200 every time; no rate was ever negative; no counter of the
    canary ever went down (nothing lost across the fault)."""
    assert recorder.statuses, "the recorder read nothing"
    assert set(recorder.statuses) == {200}, recorder.statuses
    last: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for page in recorder.pages:
        for name, labels, value in all_sample_values(page, "tritonwatch_model_"):
            if name.endswith("_per_second"):
                assert value >= 0, (name, labels, value)
        for name, labels, value in all_sample_values(page, "tritonwatch_canary_requests_total"):
            key = (name, tuple(sorted(labels.items())))
            assert value >= last.get(key, 0.0), (key, value)
            last[key] = value


@pytest.fixture
def ports() -> dict[str, int]:
    return {"http_port": free_port(), "grpc_port": free_port(), "metrics_port": free_port()}


def test_unreachable_at_start_then_up(tmp_path: Path, ports: dict[str, int]) -> None:
    """A Triton down at start is reported and counted, then picked up by itself when it comes up."""
    http_url = f"http://127.0.0.1:{ports['http_port']}"
    metrics_url = f"http://127.0.0.1:{ports['metrics_port']}/metrics"
    daemon = DaemonProcess(_config(tmp_path / "c.yaml", http_url, metrics_url))
    recorder = MetricsRecorder(daemon)
    try:
        assert daemon.wait_for_event("target_not_ready", target="sim")["outcome"] == (
            "connection_error"
        )
        failed = daemon.wait_for_event("scrape_failed", target="sim", source="metrics")
        assert failed["outcome"] == "connection_error"
        assert failed["level"] == "warning"
        unavailable = daemon.wait_for_event("canary_metadata_unavailable", model="simple")
        assert unavailable["outcome"] == "connection_error"
        wait_until(
            lambda: metric_at_least(daemon, "tritonwatch_scrape_failures_total", 2,
                                    outcome="connection_error", **METRICS),
            10, "two refused scrapes counted",
        )  # fmt: skip
        assert metric(daemon, "tritonwatch_up", **TARGET) == 0
        assert metric(daemon, "tritonwatch_scrape_success", **METRICS) == 0
        assert http_get(f"{daemon.url}/health")[0] == 200  # the daemon itself is fine

        with Simulator(**ports):
            _assert_recovers(daemon)
            daemon.wait_for_event("target_ready", target="sim")
            daemon.wait_for_event("scrape_recovered", target="sim", source="metrics")
            # The canary retries metadata with backoff (1 s, 2 s, …): it starts by itself.
            daemon.wait_for_event("canary_started", model="simple", timeout=15)
            wait_until(lambda: _canary(daemon, "success") >= 5, 15, "canary successes")
            wait_until(lambda: _rates_present(daemon), 10, "Triton's rates")
    finally:
        recorder.stop()
        assert daemon.stop() == 0
    _check_recording(recorder)


def test_killed_mid_run_and_back(tmp_path: Path, ports: dict[str, int]) -> None:
    """SIGKILL, then a fresh server on the same ports with its counters at zero."""
    sim = SimProcess(**ports)
    daemon = DaemonProcess(_config(tmp_path / "c.yaml", sim.http_url, sim.metrics_url))
    recorder = MetricsRecorder(daemon)
    try:
        wait_until(lambda: _rates_present(daemon), 15, "rates before the kill")
        successes = _canary(daemon, "success")
        mark = len(daemon.events)

        sim.kill()
        down = daemon.wait_for_event("target_not_ready", after=mark, target="sim")
        assert down["outcome"] == "connection_error"
        failed = daemon.wait_for_event("scrape_failed", after=mark, target="sim", source="metrics")
        assert failed["outcome"] == "connection_error"
        daemon.wait_for_event("canary_circuit_open", after=mark, model="simple")
        wait_until(
            lambda: metric_at_least(daemon, "tritonwatch_scrape_failures_total", 1,
                                    outcome="connection_error", **METRICS),
            10, "the refused scrape counted",
        )  # fmt: skip
        text = daemon.metrics()
        assert sample_value(text, "tritonwatch_up", list(TARGET.items())) == 0
        assert (
            counter_total(text, "tritonwatch_canary_requests_total", outcome="connection_error") > 0
        )
        assert sample_value(text, "tritonwatch_canary_circuit_open", [("model", "simple")]) == 1

        sim = SimProcess(**ports)
        _assert_recovers(daemon)
        reset = daemon.wait_for_event("triton_counters_reset", after=mark, target="sim")
        assert reset["models"] == ["simple"]
        # The canary's breaker sends one probe per BREAKER_PROBE_SECONDS while open.
        wait_until(lambda: _canary(daemon, "success") > successes, 5 * BREAKER_PROBE_SECONDS,
                   "canary successes again")  # fmt: skip
        daemon.wait_for_event("canary_circuit_closed", after=mark, model="simple")
        assert metric(daemon, "tritonwatch_canary_circuit_open", model="simple") == 0
        wait_until(lambda: _rates_present(daemon), 10, "rates after the restart")
    finally:
        recorder.stop()
        assert daemon.stop() == 0
        sim.stop()
    _check_recording(recorder)


def test_hanging_triton_times_out_without_piling_up(tmp_path: Path) -> None:
    """Every request accepted and never answered (health, inference, statistics, and a
    /metrics that answers after a minute): timeouts everywhere, while the daemon's
    threads, descriptors and connections to Triton stay bounded."""
    with SimProcess() as sim:  # its hung requests pile up in its process, not here
        daemon = DaemonProcess(_config(tmp_path / "c.yaml", sim.http_url, sim.metrics_url))
        recorder = MetricsRecorder(daemon)
        try:
            wait_until(lambda: _canary(daemon, "success") >= 5 and _serving(daemon), 15, "warm")
            pid, port = daemon.process.pid, port_of(sim.http_url)
            threads, fds = thread_count(pid), open_fds(pid)
            mark = len(daemon.events)
            sim.inject_fault(kind="hang", scope="server")
            sim.inject_fault(kind="slow_metrics", delay_s=60)
            seen: list[tuple[int, int, int]] = []

            def hung_for_a_while() -> bool:
                seen.append((thread_count(pid), open_fds(pid), connections_to(pid, port)))
                text = daemon.metrics()
                return (
                    counter_total(text, "tritonwatch_canary_requests_total", outcome="timeout") >= 5
                    and counter_total(text, "tritonwatch_scrape_failures_total",
                                      outcome="timeout", **METRICS) >= 3
                )  # fmt: skip

            wait_until(hung_for_a_while, 20, "three timed-out scrapes and canary timeouts")
            assert daemon.wait_for_event("target_not_ready", after=mark)["outcome"] == "timeout"
            failed = daemon.wait_for_event("scrape_failed", after=mark, source="metrics")
            assert failed["outcome"] == "timeout"
            daemon.wait_for_event("canary_circuit_open", after=mark, model="simple")
            assert metric(daemon, "tritonwatch_up", **TARGET) == 0
            assert metric(daemon, "tritonwatch_canary_circuit_open", model="simple") == 1

            most_threads = max(s[0] for s in seen)
            most_fds = max(s[1] for s in seen)
            most_connections = max(s[2] for s in seen)
            assert most_threads <= threads + 4, (threads, seen)
            assert most_fds <= fds + 8, (fds, seen)
            # the canary's slots, the readiness probe and the scraper's session at most
            assert most_connections <= MAX_IN_FLIGHT + 2, seen
            # sampled from the fault's start until three scrapes had timed out
            assert len(seen) >= 3

            sim.clear_faults()
            _assert_recovers(daemon)
            daemon.wait_for_event("target_ready", after=mark)
        finally:
            recorder.stop()
            assert daemon.stop() == 0
    _check_recording(recorder)


def test_slow_metrics_beyond_the_timeout(tmp_path: Path) -> None:
    """/metrics answers after 2 s with a 500 ms timeout: the scrape times out, the rest
    (readiness, canary) carries on."""
    with Simulator() as sim:
        daemon = DaemonProcess(_config(tmp_path / "c.yaml", sim.http_url, sim.metrics_url))
        recorder = MetricsRecorder(daemon)
        try:
            wait_until(lambda: _rates_present(daemon), 15, "rates before the fault")
            mark = len(daemon.events)
            sim.inject_fault(kind="slow_metrics", delay_s=2)
            failed = daemon.wait_for_event("scrape_failed", after=mark, source="metrics")
            assert failed["outcome"] == "timeout"
            wait_until(
                lambda: metric_at_least(daemon, "tritonwatch_scrape_failures_total", 2,
                                        outcome="timeout", **METRICS),
                10, "two timed-out scrapes counted",
            )  # fmt: skip
            successes = _canary(daemon, "success")
            assert metric(daemon, "tritonwatch_scrape_success", **METRICS) == 0
            assert metric(daemon, "tritonwatch_up", **TARGET) == 1
            wait_until(lambda: _canary(daemon, "success") >= successes + 5, 10, "canary going on")

            sim.clear_faults()
            _assert_recovers(daemon)
            daemon.wait_for_event("scrape_recovered", after=mark, source="metrics")
            wait_until(lambda: _rates_present(daemon), 10, "rates after the fault")
        finally:
            recorder.stop()
            assert daemon.stop() == 0
    _check_recording(recorder)


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator() as simulator:
        yield simulator


def test_garbage_and_oversized_metrics(tmp_path: Path, sim: Simulator) -> None:
    """Binary garbage fails the scrape; text garbage is all bad lines; a 10 MB page is
    refused by a 1 MiB ``scrape.max_body_bytes``; the real page brings everything back."""
    front = MetricsFront(sim.metrics_url)
    cap = 2**20
    daemon = DaemonProcess(
        _config(tmp_path / "c.yaml", sim.http_url, front.url, max_body_bytes=cap)
    )
    recorder = MetricsRecorder(daemon)
    try:
        wait_until(lambda: _rates_present(daemon), 15, "rates from the real page")

        mark = len(daemon.events)
        front.mode = "garbage_bytes"
        failed = daemon.wait_for_event("scrape_failed", after=mark, source="metrics")
        assert failed["outcome"] == "bad_response"
        assert "not UTF-8" in failed["error"]
        wait_until(
            lambda: metric_at_least(daemon, "tritonwatch_scrape_failures_total", 1,
                                    outcome="bad_response", **METRICS),
            10, "the garbage counted",
        )  # fmt: skip
        assert metric(daemon, "tritonwatch_scrape_success", **METRICS) == 0

        mark = len(daemon.events)
        bad_lines = metric(daemon, "tritonwatch_scrape_bad_lines_total", **TARGET) or 0
        front.mode = "garbage_text"
        logged = daemon.wait_for_event("scrape_bad_lines", after=mark, target="sim")
        assert logged["bad_lines"] == GARBAGE_TEXT.count(b"\n")
        wait_until(
            lambda: metric_at_least(daemon, "tritonwatch_scrape_bad_lines_total",
                                    bad_lines + logged["bad_lines"], **TARGET),
            10, "the bad lines counted",
        )  # fmt: skip

        mark = len(daemon.events)
        front.mode = "huge"
        failed = daemon.wait_for_event("scrape_failed", after=mark, source="metrics")
        assert failed["outcome"] == "too_large"
        assert failed["error"] == f"body over {cap} bytes"
        wait_until(
            lambda: metric_at_least(daemon, "tritonwatch_scrape_failures_total", 2,
                                    outcome="too_large", **METRICS),
            10, "two oversized pages counted",
        )  # fmt: skip
        assert front.count("huge") >= 2

        front.mode = "proxy"
        _assert_recovers(daemon)
        daemon.wait_for_event("scrape_recovered", after=mark, source="metrics")
        wait_until(lambda: _rates_present(daemon), 10, "rates from the real page again")
        assert metric(daemon, "tritonwatch_up", **TARGET) == 1
    finally:
        recorder.stop()
        assert daemon.stop() == 0
        front.close()
    _check_recording(recorder)
