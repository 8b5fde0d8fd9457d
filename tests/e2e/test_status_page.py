"""The status page as a browser renders it: headless Chromium against a running daemon."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from PIL import Image  # Pillow: a dependency of matplotlib (the dev extra)

from real_triton import RealTriton
from support import QUIET_HOST_CPU, DaemonProcess, http_get, sample_value, wait_until
from tritonwatch.commands.demo import demo_model_set
from tritonwatch.export.status_charts import BUDGET_COLOUR, OVER_COLOUR, P95_COLOUR, spark_y
from tritonwatch.sim.server import Simulator

pytestmark = pytest.mark.real
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


def _devtools_port(profile: Path) -> str | None:
    """The port Chromium wrote to its profile, once the file is complete."""
    written = profile / "DevToolsActivePort"
    lines = written.read_text().split() if written.is_file() else []
    return lines[0] if len(lines) >= 2 else None


class DevTools:
    """Headless Chromium driven over the DevTools protocol: the page's own layout
    (bounding boxes) and a screenshot of exactly what it drew."""

    def __init__(self, tmp_path: Path) -> None:
        binary = shutil.which("chromium")
        assert binary is not None, "make test installs Debian's chromium"
        profile = tmp_path / "devtools-profile"
        self._process = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, "--remote-debugging-port=0", f"--user-data-dir={profile}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            port = wait_until(lambda: _devtools_port(profile), 30, "Chromium's DevTools port")
            pages = json.loads(wait_until(lambda: http_get(f"http://127.0.0.1:{port}/json/list")[1],
                                          10, "the DevTools page list"))  # fmt: skip
            self._ws_url = next(p["webSocketDebuggerUrl"] for p in pages if p["type"] == "page")
        except BaseException:
            self.close()
            raise

    def load(self, url: str, width: int, height: int, script: str) -> tuple[Any, bytes]:
        """Loads ``url`` in a ``width`` × ``height`` viewport at one device pixel per CSS
        pixel; returns what ``script`` evaluates to (JSON) and a PNG screenshot."""
        return asyncio.run(asyncio.wait_for(self._load(url, width, height, script), 60))

    async def _load(self, url: str, width: int, height: int, script: str) -> tuple[Any, bytes]:
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(self._ws_url, max_msg_size=0) as ws,
        ):
            ids = iter(range(1, 1_000))

            async def call(method: str, **params: Any) -> dict[str, Any]:
                sent = next(ids)
                await ws.send_json({"id": sent, "method": method, "params": params})
                while True:
                    message = await ws.receive_json()
                    if message.get("id") == sent:
                        assert "error" not in message, message
                        return dict(message["result"])

            await call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                       deviceScaleFactor=1, mobile=False)  # fmt: skip
            await call("Page.enable")
            await call("Page.navigate", url=url)
            while (await ws.receive_json()).get("method") != "Page.loadEventFired":
                pass
            value = await call("Runtime.evaluate", expression=script, returnByValue=True)
            shot = await call("Page.captureScreenshot", format="png")
        return json.loads(value["result"]["value"]), base64.b64decode(shot["data"])

    def close(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(10)


_BOXES_AND_DOM = """JSON.stringify({
  dom: document.documentElement.outerHTML,
  boxes: Object.fromEntries([...document.querySelectorAll("section.model")].map(s => {
    const r = s.querySelector("svg.sparkline").getBoundingClientRect();
    return [s.dataset.model, [r.left + scrollX, r.top + scrollY, r.width, r.height]];
  })),
})"""


def _colour_mask(pixels: np.ndarray, colour: str, tolerance: int = 24) -> np.ndarray:
    """Which pixels are ``colour`` (``#rrggbb``), give or take anti-aliasing."""
    rgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)
    return np.all(np.abs(pixels[..., :3].astype(np.int16) - rgb) <= tolerance, axis=-1)


def _crop(png: bytes, box: list[float]) -> np.ndarray:
    left, top, width, height = box
    with Image.open(io.BytesIO(png)) as image:
        assert image.size[1] >= top + height, "the sparkline is below the screenshot"
        region = image.convert("RGB").crop(
            (math.floor(left), math.floor(top), math.ceil(left + width), math.ceil(top + height))
        )
        return np.asarray(region)


def _section(html: str, model: str) -> str:
    sections = html.split('<section class="model"')[1:]
    return next((s for s in sections if f'data-model="{model}"' in s), "")


def _settled(html: str) -> bool:
    """Nothing breaches and simple's sparkline ends in four points within the budget."""
    if 'data-breaching="0"' not in html or "<polyline" not in _section(html, "simple"):
        return False
    values, budget, _ = _sparkline_values(_section(html, "simple"))
    return len(values) >= 4 and all(v <= budget for v in values[-4:])


def _spiked(html: str) -> bool:
    """One model breaches, and simple's sparkline ends in three points over the budget."""
    if 'data-breaching="1"' not in html or "<polyline" not in _section(html, "simple"):
        return False
    values, budget, _ = _sparkline_values(_section(html, "simple"))
    return all(v > budget for v in values[-3:])


def _sparkline_values(section: str) -> tuple[list[float], float, float]:
    """The p95 seconds the section's polyline was drawn at, its budget and the budget
    line's y, read back from the coordinates."""
    y_max = float(re.search(r'data-y-max-seconds="([^"]+)"', section).group(1))  # type: ignore[union-attr]
    budget = float(re.search(r'data-budget-seconds="([^"]+)"', section).group(1))  # type: ignore[union-attr]
    points = re.search(r'<polyline class="p95" points="([^"]*)"', section)
    budget_y = float(re.search(r'class="budget"[^>]* y1="([^"]+)"', section).group(1))  # type: ignore[union-attr]
    top, bottom = spark_y(y_max, y_max), spark_y(0.0, y_max)
    ys = [float(pair.split(",")[1]) for pair in points.group(1).split()] if points else []
    return [(bottom - y) / (bottom - top) * y_max for y in ys], budget, budget_y


def test_headline_counts_the_breaching_model_and_its_sparkline_is_drawn(tmp_path: Path) -> None:
    """Breaks if the headline does not say "1 of 2" when one model's latency spikes over
    its budget, the breaching model's p95 history is not on the page as a polyline with
    the budget line and warning dots, or Chromium's pixels inside the sparkline's box do
    not show the polyline's and the budget line's colours at their places."""
    with Simulator() as sim:
        config = tmp_path / "c.yaml"
        config.write_text(
            "canary: {rate: 5/s, timeout: 5s}\nscrape: {interval: 1s, timeout: 800ms}\n"
            "alerting: {evaluation_interval: 1s}\nsweep: {enabled: false}\n"
            "slo: {latency: {threshold: 500ms}}\n"  # far above a busy 2-core machine's noise
            f"targets: [{{name: sim, url: '{sim.http_url}', metrics_url: '{sim.metrics_url}',"
            " models: [{name: simple}, {name: resnet50}]}]\n"
        )
        daemon = DaemonProcess(config)
        try:
            # The first requests (connections, warm-up) can be slow: wait until both
            # models are within their SLO and simple has a stretch of history under budget.
            wait_until(lambda: _settled(http_get(f"{daemon.url}/")[1]), 60,
                       "both models within their SLO, four p95 points under budget")  # fmt: skip
            sim.inject_fault(kind="latency_spike", factor=600, model="simple")  # 1 ms → 0.6-1.5 s
            wait_until(lambda: _spiked(http_get(f"{daemon.url}/")[1]), 40,
                       "simple breaching, its last three p95 points over budget")  # fmt: skip
            browser = DevTools(tmp_path)
            try:
                found, png = browser.load(f"{daemon.url}/", 1200, 3000, _BOXES_AND_DOM)
            finally:
                browser.close()
        finally:
            assert daemon.stop() == 0
    (tmp_path / "status.png").write_bytes(png)  # for a person looking at a failure
    html = found["dom"]
    headline = re.search(r'<h1 class="headline"[^>]*>\s*<span class="(\w+)">([^<]+)</span>', html)
    assert headline is not None
    assert headline.groups() == ("breach", "1 of 2 models breaching their SLO")
    simple, resnet = _section(html, "simple"), _section(html, "resnet50")
    assert '<p class="verdict breach">breaching: p95 ' in simple
    assert '<p class="verdict ok">within SLO</p>' in resnet
    values, budget, budget_y = _sparkline_values(simple)
    assert budget == 0.5
    assert sum(v <= budget for v in values) >= 4 and sum(v > budget for v in values) >= 3
    assert values[-1] > budget  # the spike is still on
    assert simple.count('<circle class="over"') == sum(v > budget for v in values)
    assert all(v < budget for v in _sparkline_values(resnet)[0])
    assert "circle" not in resnet.split('<svg class="sparkline"')[1].split("</svg>")[0]

    pixels = _crop(png, found["boxes"]["simple"])
    line, dashed, over = (_colour_mask(pixels, c) for c in (P95_COLOUR, BUDGET_COLOUR, OVER_COLOUR))
    assert line.sum() >= 100, "no polyline pixels in the sparkline's box"
    assert over.sum() >= 10, "no warning dots in the sparkline's box"
    budget_rows = np.flatnonzero(dashed.sum(axis=1) >= pixels.shape[1] / 4)
    assert budget_rows.size > 0, "no dashed budget line in the sparkline's box"
    box_top = found["boxes"]["simple"][1] - math.floor(found["boxes"]["simple"][1])
    assert abs(budget_rows.mean() - (budget_y + box_top)) <= 1.5  # drawn where the budget is
    line_rows = np.flatnonzero(line.any(axis=1))
    assert line_rows.min() < budget_rows.min() and line_rows.max() > budget_rows.max()
    assert not _colour_mask(_crop(png, found["boxes"]["resnet50"]), OVER_COLOUR).any()


def _stream_row(section: str, measure: str) -> str:
    row = re.search(rf'<tr class="stream-measure" data-measure="{measure}".*?</tr>', section)
    return row.group(0) if row else ""


def _llm_timed(html: str) -> bool:
    """The streamed model's TTFT and ITL rows have a p95 and their SLOs' budget bars."""
    llm = _section(html, "llm")
    rows = [_stream_row(llm, measure) for measure in ("ttft", "itl")]
    return all("data-p95-seconds" in row and 'class="budget-bar"' in row for row in rows)


def _complete(html: str) -> bool:
    """Whether the page shows all the Chromium test reads: the knee, the breach, the
    advice and the streamed model's timings."""
    resnet50 = _section(html, "resnet50")
    shown = ('class="verdict breach"', 'class="recommendation"')
    return 'class="knee"' in html and all(part in resnet50 for part in shown) and _llm_timed(html)


def test_status_page_in_chromium(tmp_path: Path) -> None:
    """Breaks if Chromium's page lacks a model, the sweep's knee, the breach or the advice,
    or the streamed LLM model's row lacks its TTFT/ITL p95 (as the ms its data carries),
    its output tokens/s or its TTFT/ITL SLO budgets, or a plain model's row has them."""
    with Simulator(demo_model_set(), host_cpu_utilization=QUIET_HOST_CPU) as sim:  # + demo's llm
        sim.set_scenario("queue-delay-too-high", "resnet50")
        config = tmp_path / "c.yaml"
        config.write_text(
            "canary: {rate: 10/s}\nscrape: {interval: 1s, timeout: 800ms}\n"
            "alerting: {evaluation_interval: 1s}\nadvisor: {window: 6s}\n"
            "sweep: {enabled: false, interval: 1s, concurrency: [1, 2], measurement_interval: 300ms,"
            " max_windows: 3}\n"
            f"targets: [{{name: sim, url: '{sim.http_url}', metrics_url: '{sim.metrics_url}',"
            " models: [{name: simple,"
            " sweep: {enabled: true}}, {name: resnet50},"
            " {name: llm, canary: {rate: 2/s, stream: {max_tokens: 16}},"
            "  slo: {latency: {threshold: 1s}, ttft: {threshold: 1s}, itl: {threshold: 250ms}}}]}]\n"
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

            # One page, served once everything it must show stands on it (the advice and
            # the breach come and go with evaluation windows on a loaded host), is what
            # Chromium renders: from a file, so that nothing changes under it meanwhile.
            def complete_page() -> str | None:
                html = http_get(f"{daemon.url}/")[1]
                return html if _complete(html) else None

            page = wait_until(
                complete_page,
                30,
                "the knee, the breach, resnet50's advice and llm's TTFT/ITL p95 on one page",
            )
            served = tmp_path / "status.html"
            served.write_text(page)
            dom = _chromium(tmp_path, "--dump-dom", served.as_uri())
            shot = tmp_path / "status.png"
            _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1200,1600", served.as_uri())
        finally:
            assert daemon.stop() == 0
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert 'data-target="sim" data-model="simple"' in html
    assert 'data-target="sim" data-model="resnet50"' in html
    assert "<svg" in html
    assert 'class="knee"' in html
    resnet50 = _section(html, "resnet50")  # its 80 ms queue delay breaks the 50 ms budget
    assert 'class="verdict breach"' in resnet50
    assert 'class="verdict breach"' not in _section(html, "simple")
    assert 'class="recommendation"' in resnet50
    assert "max_queue_delay_microseconds: 80000 → 40000" in html
    llm = _section(html, "llm")
    for measure, decimals in (("ttft", 1), ("itl", 2)):
        row = _stream_row(llm, measure)
        p95 = float(re.search(r'data-p95-seconds="([^"]+)"', row).group(1))  # type: ignore[union-attr]
        assert f'<td class="p95 ok">{p95 * 1e3:.{decimals}f} ms</td>' in row
        assert 'class="budget-bar"' in row and 'class="burn-rates"' in row
    stream = re.search(r'<table class="stream" data-output-tokens-per-second="([^"]+)">', llm)
    assert stream is not None and float(stream.group(1)) > 0
    tokens = re.search(r"<b[^>]*>([\d.]+) tokens/s</b> \((\d+) tokens since start\)", llm)
    assert tokens is not None and tokens.group(1) == f"{float(stream.group(1)):.1f}"
    assert int(tokens.group(2)) % 16 == 0  # every healthy stream ends after its 16 tokens
    assert 'class="stream"' not in _section(html, "simple")
    assert shot.exists()
    assert shot.stat().st_size > 10_000
    if keep := os.environ.get("TRITONWATCH_SCREENSHOT_OUT"):  # make screenshot: the README's
        shutil.copyfile(shot, keep)


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
    # Triton's mean request time is its stages' sum (the server's own family is at
    # exporter.detail full only).
    stages = ("queue", "compute_input", "compute_infer", "compute_output", "server_other")
    server = [values[stage] for stage in stages]
    values["server"] = None if None in server else sum(v for v in server if v is not None)
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
