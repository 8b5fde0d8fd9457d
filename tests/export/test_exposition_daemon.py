"""Every family the running daemon exports renders as prometheus_client renders it.

The daemon runs the demo's set-up — the simulator with its four models and scenarios
(HTTP and gRPC canaries, a streaming LLM canary with TTFT/ITL, a breaching SLO, an
underused GPU) — with NVML answered by the H200 recording, so the GPU families are
there with their real values (the H200's 150 754 820 096 bytes of memory, where
prometheus_client's float text and Python's part: ``1.50754820096e+11``). Its registry
is collected once and rendered by ours and by the library, in every format and
escaping the renderer serves; one differing byte fails.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.core import Metric
from test_exposition import assert_renders_as_library

from sim_process import SimProcess
from support import REPO, assert_promtool_clean, fixtures_dir, http_get, wait_until
from tritonwatch.commands.demo import DEMO_SCENARIOS, demo_config, demo_model_set
from tritonwatch.config import load_config
from tritonwatch.export.exposition import Renderer
from tritonwatch.runtime.daemon import Daemon
from tritonwatch.scrape.nvml_fake import FakeNvml

pytestmark = pytest.mark.real

WANTED = {
    "tritonwatch_canary_latency_seconds",
    "tritonwatch_slo_burn_rate",
    "tritonwatch_model_requests_per_second",
    "tritonwatch_canary_time_to_first_token_seconds",
    "tritonwatch_gpu_memory_total_bytes",
    "tritonwatch_gpu_utilization_ratio",
    "tritonwatch_recommendation",
}
"""Families from each part of the daemon; the registry is read once all have samples."""
H200_MEMORY_BYTES = 150_754_820_096
SCRAPED: list[str] = []
"""The running daemon's /metrics, as Prometheus scraped it (once, beside the registry)."""


@pytest.fixture(scope="module")
def daemon_families(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Metric]]:
    folder: Path = tmp_path_factory.mktemp("exposition")
    fake = FakeNvml.from_file(fixtures_dir() / "nvml" / "h200_probe.json", gpus=2)
    fake.seek("duty_100")
    with SimProcess(demo_model_set(), seed=0) as sim:
        for model, scenario in DEMO_SCENARIOS.items():
            sim.set_scenario(scenario, model)
        path = demo_config(sim, folder, "127.0.0.1:0")  # type: ignore[arg-type]
        text = path.read_text().replace(
            "interval: 5s, timeout: 2s", "interval: 300ms, timeout: 250ms"
        )
        # every family the daemon has: the collectors skip full-only ones below full
        text = text.replace("exporter: {listen:", "exporter: {detail: full, listen:")
        path.write_text(text + "alerting: {evaluation_interval: 500ms}\nnvml: {enabled: true}\n")
        daemon = Daemon(path, load_config(path), listen_override="127.0.0.1:0", nvml=fake)
        daemon.start()
        try:

            def populated() -> bool:
                fake.step()  # the recording moves on as the GPU would
                return {f.name for f in daemon.registry.collect() if f.samples} >= WANTED

            wait_until(populated, 60, f"samples in each of {sorted(WANTED)}")
            time.sleep(0.5)
            status, text = http_get(f"{daemon.exporter_url}/metrics")
            assert status == 200
            SCRAPED.append(text)
            yield list(daemon.registry.collect())
        finally:
            daemon.stop()


def test_every_family_the_daemon_exports_renders_byte_identical(
    daemon_families: list[Metric],
) -> None:
    """Breaks if any family the daemon really exports — canary, streaming, Triton, SLO,
    advice, GPU, process — renders differently from the library in any format."""
    names = {family.name for family in daemon_families if family.samples}
    assert names >= WANTED
    assert sum(len(family.samples) for family in daemon_families) > 300
    assert_renders_as_library(daemon_families)


def test_the_gpu_memory_total_is_the_h200s_in_go_float_text(daemon_families: list[Metric]) -> None:
    """Breaks if a value between 1e10 and 1e16 is not written as the library writes it
    (``1.50754820096e+11``; ``e+011`` before prometheus_client 0.26)."""
    (family,) = (f for f in daemon_families if f.name == "tritonwatch_gpu_memory_total_bytes")
    assert {sample.value for sample in family.samples} == {float(H200_MEMORY_BYTES)}
    body = Renderer().render(daemon_families, openmetrics=True).decode()
    lines = [line for line in body.splitlines() if line.startswith(family.name + "{")]
    assert len(lines) == 7  # NVML's two GPUs and the five Triton reports (the simulator's H200s)
    assert all(line.endswith(" 1.50754820096e+11") for line in lines)


def test_daemon_registry_is_promtool_clean(daemon_families: list[Metric]) -> None:
    """Breaks if the daemon's rendered text 0.0.4 fails ``promtool check metrics``."""
    assert_promtool_clean(Renderer().render(daemon_families, openmetrics=False).decode())


def test_the_metrics_reference_lists_every_family_the_daemon_exports(
    daemon_families: list[Metric],
) -> None:
    """Breaks if a family the running daemon's /metrics carries is missing from
    docs/reference/metrics.md (regenerate it: ``make docs``)."""
    from prometheus_client.parser import text_string_to_metric_families

    reference = (REPO / "docs" / "reference" / "metrics.md").read_text()
    listed = set(re.findall(r"^\| `(tritonwatch_[a-z0-9_]+)` \|", reference, re.M))
    (text,) = SCRAPED
    scraped = {family.name for family in text_string_to_metric_families(text)}
    ours = {name for name in scraped if name.startswith("tritonwatch_")}
    assert len(ours) > 60
    exposed = {name + ("_total" if f"{name}_total" in listed else "") for name in ours}
    exposed = {name + ("_info" if f"{name}_info" in listed else "") for name in exposed}
    assert exposed - listed == set()
