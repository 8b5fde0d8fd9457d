"""The advisor on real tritonserver 2.51, beside the simulator's scenarios: the exact
recommendations for a CPU instance under load, for the batching delay model, and for
both on a CPU-starved host.

* ``waiting_cpu`` waits 20 ms per request (a sleep), cannot batch, one ``KIND_CPU``
  instance; three concurrent perf_analyzer clients beside the canary queue its requests:
  the one right change is ``instance_group.count`` 1 → 2, and nothing else.
* ``slow_queue``'s batcher waits 30 ms for batches light traffic never fills: lower
  ``max_queue_delay_microseconds``.
* With every core of the host busy (spinning processes), neither gets "add an
  instance" nor "lower the queue delay": the queue is the host's, and the burning,
  queue-bound ``waiting_cpu`` says so (``tritonwatch_advice_blocked``,
  ``reason="host_cpu_saturated"``).

The host CPU is Triton's own ``nv_cpu_utilization``. The thresholds are set for a
shared test machine: "spare" below 0.97 (other tests run beside this one), "saturated"
from 0.7 in the starved case, which the spinning processes pass on any core count.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from perf_analyzer_support import proxy_free_environment
from real_triton import RealTriton, perf_analyzer_binary
from support import DaemonProcess, http_get, wait_until

pytestmark = pytest.mark.real

ADVISOR_WINDOW_S = 15


def _config(path: Path, triton: RealTriton, *, spare: float, saturated: float) -> Path:
    path.write_text(
        "scrape: {interval: 1s, timeout: 800ms}\n"
        "alerting: {evaluation_interval: 1s}\n"
        f"advisor: {{window: {ADVISOR_WINDOW_S}s, cpu_spare_threshold: {spare}, "
        f"cpu_saturated_threshold: {saturated}}}\n"
        "canary: {rate: 5/s}\n"
        "slo: {latency: {threshold: 40ms, objective: 0.95}}\n"
        f"targets: [{{name: real, url: '{triton.http_url}', metrics_url: '{triton.metrics_url}',"
        " models: [{name: waiting_cpu}, {name: slow_queue, slo: {latency: {threshold: 10ms}}}]}]\n"
    )
    return path


@contextmanager
def _clients(triton: RealTriton, concurrency: int) -> Iterator[None]:
    """perf_analyzer keeping ``concurrency`` requests in flight on ``waiting_cpu``."""
    command = [str(perf_analyzer_binary()), "-m", "waiting_cpu", "-u", triton.http_url.removeprefix("http://"),
               "-i", "http", "--input-data", "zero", "--concurrency-range",
               f"{concurrency}:{concurrency}", "-p", "2000", "--max-trials", "100", "-s", "0"]  # fmt: skip
    load = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=proxy_free_environment())  # fmt: skip
    try:
        yield
    finally:
        load.terminate()
        load.wait(timeout=30)


@contextmanager
def _busy_cores() -> Iterator[None]:
    """One spinning process per core: the host's CPU saturated."""
    spin = [sys.executable, "-c", "while True: pass"]
    spinners = [subprocess.Popen(spin) for _ in range(os.cpu_count() or 2)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def _advice(daemon: DaemonProcess) -> tuple[dict[str, set[str]], dict[str, str], float | None]:
    """Each model's recommended actions, its blocked reason, and Triton's host CPU."""
    actions: dict[str, set[str]] = {"waiting_cpu": set(), "slow_queue": set()}
    blocked: dict[str, str] = {}
    cpu = None
    for family in text_string_to_metric_families(daemon.metrics()):
        for sample in family.samples:
            if sample.name == "tritonwatch_recommendation":
                actions.setdefault(sample.labels["model"], set()).add(sample.labels["action"])
            elif sample.name == "tritonwatch_advice_blocked":
                blocked[sample.labels["model"]] = sample.labels["reason"]
            elif sample.name == "tritonwatch_server_cpu_utilization_ratio":
                cpu = sample.value
    return actions, blocked, cpu


def _within_two_windows(check: Callable[[], object], what: str) -> object:
    return wait_until(check, 2 * ADVISOR_WINDOW_S + 20, what, every=0.5)


@pytest.fixture
def triton(real_triton: RealTriton) -> RealTriton:
    """The session's server: these tests only send load and read, they change no model."""
    return real_triton


def test_one_cpu_instance_under_load_gets_one_more_and_the_delay_model_a_lower_delay(
    tmp_path: Path, triton: RealTriton
) -> None:
    """Breaks if the queued, unbatchable KIND_CPU model gets no advice (the silence the
    issue measured), anything besides instance_group.count 1 → 2, or if the delay
    model stops getting its lower delay."""
    daemon = DaemonProcess(_config(tmp_path / "c.yaml", triton, spare=0.97, saturated=0.99))
    try:
        with _clients(triton, 3):
            wanted = {"waiting_cpu": {"add_instance"}, "slow_queue": {"lower_queue_delay"}}
            _within_two_windows(lambda: _advice(daemon)[0] == wanted, f"exactly {wanted}")
            added = daemon.wait_for_event("recommendation", model="waiting_cpu")
            assert (added["action"], added["current"], added["proposed"]) == ("add_instance", 1, 2)
            assert added["parameter"] == "instance_group.count"
            assert "KIND_CPU" in added["reason"]
            lowered = daemon.wait_for_event("recommendation", model="slow_queue")
            assert (lowered["current"], lowered["proposed"]) == (30000, 15000)
    finally:
        daemon.stop()


def test_a_cpu_starved_host_gets_neither_an_instance_nor_a_lower_delay(
    tmp_path: Path, triton: RealTriton
) -> None:
    """Breaks if, with every core busy, either model is told to add an instance or
    lower its queue delay, or the burning queue-bound model is silent about why."""
    with _busy_cores():
        # The host saturated before the daemon's first evaluation, as Triton reports it.
        wait_until(lambda: (_host_cpu(triton) or 0.0) >= 0.7, 30, "Triton to see the busy host")
        daemon = DaemonProcess(_config(tmp_path / "c.yaml", triton, spare=0.5, saturated=0.7))
        try:
            with _clients(triton, 3):
                _within_two_windows(
                    lambda: _advice(daemon)[1].get("waiting_cpu") == "host_cpu_saturated",
                    "waiting_cpu blocked by the saturated host",
                )
                actions, blocked, cpu = _advice(daemon)
                page = http_get(f"{daemon.url}/")[1]
        finally:
            daemon.stop()
    for model in ("waiting_cpu", "slow_queue"):
        assert not actions.get(model, set()) & {"add_instance", "lower_queue_delay"}
    assert blocked["waiting_cpu"] == "host_cpu_saturated"
    assert cpu is not None and cpu >= 0.7
    section = page[page.index('data-model="waiting_cpu"') :]
    assert 'class="advice-blocked" data-reason="host_cpu_saturated"' in section
    events = [e for e in daemon.events if e.get("event") == "recommendation"]
    assert not [e for e in events if e["action"] in {"add_instance", "lower_queue_delay"}]


def _host_cpu(triton: RealTriton) -> float | None:
    """Triton's own ``nv_cpu_utilization`` now."""
    text = urllib.request.urlopen(triton.metrics_url, timeout=5).read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "nv_cpu_utilization":
            return float(family.samples[0].value)
    return None
