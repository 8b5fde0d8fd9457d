"""The status page as a browser renders it: headless Chromium against a running daemon."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

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
