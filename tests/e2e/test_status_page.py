"""The status page as a browser renders it: headless Chromium against a running daemon."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from real_triton import RealTriton
from support import DaemonProcess, http_get, sample_value, wait_until
from tritonwatch.sim.server import Simulator

pytestmark = pytest.mark.e2e
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)  # fmt: skip


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("chromium")
    assert binary is not None, "make test installs Debian's chromium"
    return subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip


def test_status_page_in_chromium(tmp_path: Path) -> None:
    with Simulator() as sim:
        sim.set_scenario("queue-delay-too-high", "resnet50")
        config = tmp_path / "c.yaml"
        config.write_text(
            "canary: {rate: 10/s}\nscrape: {interval: 1s, timeout: 800ms}\n"
            "alerting: {evaluation_interval: 1s}\nadvisor: {window: 6s}\n"
            "sweep: {enabled: false, interval: 1s, concurrency: [1, 2], measurement_interval: 300ms,"
            " max_windows: 3}\n"
            f"targets: [{{name: sim, url: '{sim.http_url}', metrics_url: '{sim.metrics_url}',"
            " models: [{name: simple,"
            " sweep: {enabled: true}}, {name: resnet50}]}]\n"
        )
        daemon = DaemonProcess(config)
        try:
            daemon.wait_for_event("sweep_finished", timeout=30)
            daemon.wait_for_event("recommendation", timeout=30, model="resnet50")
            wait_until(
                lambda: (sample_value(http_get(f"{daemon.url}/metrics")[1],
                                      "tritonwatch_canary_requests_total",
                                      [("model", "resnet50"), ("outcome", "success")]) or 0) >= 3,
                20, "resnet50 canary successes",
            )  # fmt: skip
            dom = _chromium(tmp_path, "--dump-dom", f"{daemon.url}/")
            shot = tmp_path / "status.png"
            _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1200,1600", f"{daemon.url}/")
        finally:
            assert daemon.stop() == 0
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert 'data-target="sim" data-model="simple"' in html
    assert 'data-target="sim" data-model="resnet50"' in html
    assert "<svg" in html
    assert 'class="knee"' in html
    assert "breach" in html  # resnet50's 80 ms queue delay breaks the 50 ms budget
    assert 'class="recommendation"' in html
    assert "max_queue_delay_microseconds: 80000 → 40000" in html
    assert shot.exists()
    assert shot.stat().st_size > 10_000


def test_status_page_shows_why_the_canary_fails_on_real_triton(
    tmp_path: Path, real_triton: RealTriton
) -> None:
    """Breaks if the page stops showing a failing model's last canary error (outcome,
    time, the server's own reason), or shows one for a model that never failed."""
    sample = tmp_path / "negative.npy"
    np.save(sample, np.array([[-1, 0, 0, 0]], dtype=np.float32))  # the flaky model fails it
    config = tmp_path / "c.yaml"
    config.write_text(
        "canary: {rate: 5/s}\nscrape: {interval: 1s, timeout: 800ms}\n"
        "sweep: {enabled: false}\n"
        f"targets: [{{name: real, url: '{real_triton.http_url}',"
        f" metrics_url: '{real_triton.metrics_url}', models: ["
        f"{{name: flaky, canary: {{inputs: {{INPUT0: {{file: '{sample}'}}}}}}}},"
        " {name: batching}]}]\n"
    )
    daemon = DaemonProcess(config)
    try:
        failed = daemon.wait_for_event("canary_request_failed", timeout=30, model="flaky")
        wait_until(
            lambda: (sample_value(http_get(f"{daemon.url}/metrics")[1],
                                  "tritonwatch_canary_requests_total",
                                  [("model", "batching"), ("outcome", "success")]) or 0) >= 3,
            20, "batching canary successes",
        )  # fmt: skip
        dom = _chromium(tmp_path, "--dump-dom", f"{daemon.url}/")
    finally:
        assert daemon.stop() == 0
    assert failed["error"] == "[500] negative input: failure asked for"
    assert (failed["outcome"], failed["status"], failed["protocol"]) == ("http_error", 500, "http")
    assert dom.returncode == 0, dom.stderr[-2000:]
    sections = dom.stdout.split('<section class="model"')[1:]
    flaky = next(s for s in sections if 'data-model="flaky"' in s)
    batching = next(s for s in sections if 'data-model="batching"' in s)
    assert 'class="last-error"' in flaky
    assert "<b>http_error</b>" in flaky
    assert "[500] negative input: failure asked for" in flaky
    stamp = re.search(r'<time datetime="(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)">', flaky)
    assert stamp is not None
    assert failed["timestamp"][:16] <= stamp.group(1)  # at or after the first failure's line
    assert "last-error" not in batching


def _breakdown_metrics(text: str) -> dict[str, float | None]:
    """Triton's mean request time and each breakdown stage of ``real/batching``."""
    model = [("target", "real"), ("model", "batching")]
    values = {
        stage: sample_value(text, "tritonwatch_model_latency_breakdown_seconds",
                            [*model, ("stage", stage)])
        for stage in ("queue", "compute_input", "compute_infer", "compute_output",
                      "server_other", "network_client")
    }  # fmt: skip
    values["server"] = sample_value(text, "tritonwatch_model_server_latency_seconds", model)
    return values


def _ms_after(label: str, line: str) -> float:
    match = re.search(rf"{label} (?:<b[^>]*>)?(-?\d+\.\d\d) ms", line)
    assert match is not None, f"no {label!r} in {line!r}"
    return float(match.group(1))


def test_status_page_says_what_the_client_adds_on_real_triton(
    tmp_path: Path, real_triton: RealTriton
) -> None:
    """Breaks if the page's "client end to end = server + client & network" line is
    missing, does not add up, or disagrees with what the daemon exports for the same
    window (tritonwatch_model_latency_breakdown_seconds, the server latency gauge)."""
    config = tmp_path / "c.yaml"
    config.write_text(
        "canary: {rate: 20/s}\nscrape: {interval: 4s, timeout: 2s}\nsweep: {enabled: false}\n"
        f"targets: [{{name: real, url: '{real_triton.grpc_url}',"
        f" metrics_url: '{real_triton.metrics_url}', models: [{{name: batching}}]}}]\n"
    )
    daemon = DaemonProcess(config)
    try:
        wait_until(
            lambda: _breakdown_metrics(http_get(f"{daemon.url}/metrics")[1])["network_client"]
            is not None, 30, "a breakdown with the canary's mean",
        )  # fmt: skip
        for _ in range(5):  # the page and /metrics must show the same scrape window
            before = _breakdown_metrics(http_get(f"{daemon.url}/metrics")[1])
            dom = _chromium(tmp_path, "--dump-dom", f"{daemon.url}/")
            after = _breakdown_metrics(http_get(f"{daemon.url}/metrics")[1])
            if before == after:
                break
        else:
            pytest.fail("every page load straddled a scrape")
    finally:
        assert daemon.stop() == 0
    assert dom.returncode == 0, dom.stderr[-2000:]
    match = re.search(r'<p class="client-share"[^>]*>.*?</p>', dom.stdout, re.S)
    assert match is not None, "no client-share line on the page"
    line = match.group(0)
    exact = dict(re.findall(r'data-([a-z-]+)-seconds="([^"]+)"', line))
    end_to_end, server = float(exact["end-to-end"]), float(exact["server"])
    residual = float(exact["client-network"])
    assert server == pytest.approx(after["server"], rel=1e-9)
    assert end_to_end == pytest.approx(server + residual, rel=1e-9)
    exported = after["network_client"]
    assert exported == pytest.approx(max(0.0, residual), rel=1e-9, abs=1e-12)  # clamped there
    if residual < 0:
        assert "covers every client" in line  # shown as measured, and why
    shown = {label: _ms_after(label, line) for label in
             ("client end to end", "server", "queue", "compute", "client &amp; network")}  # fmt: skip
    assert shown["client end to end"] == pytest.approx(end_to_end * 1e3, abs=0.0051)
    assert shown["client end to end"] == pytest.approx(
        shown["server"] + shown["client &amp; network"], abs=0.0101
    )  # each is rounded to 0.01 ms
    assert shown["client &amp; network"] == pytest.approx(residual * 1e3, abs=0.0051)
    assert shown["queue"] == pytest.approx(after["queue"] * 1e3, abs=0.0051)
    compute = sum(after[s] or 0.0 for s in ("compute_input", "compute_infer", "compute_output"))
    assert shown["compute"] == pytest.approx(compute * 1e3, abs=0.0051)
    percent = re.search(r'class="client-network">-?\d+\.\d\d ms \((-?\d+)%\)', line)
    assert percent is not None
    assert int(percent.group(1)) == round(residual / end_to_end * 100)
