"""Pipelines on real tritonserver 2.51: the daemon splits the ensemble ``pipeline`` and
the BLS model ``bls`` into their steps, names core's queue as what makes them slow, and
recommends core's ``max_queue_delay_microseconds`` for both SLOs.

``pipeline`` = prep (3 ms) → core (5 ms behind a 20 ms batching delay) → post (1 ms)
runs ~30 ms against a 20 ms budget, ~20 ms of it in core's queue, which the ensemble's
own statistics put in no stage. ``bls`` calls core twice (~50 ms, ~40 of it core's
queue) against a 45 ms budget: today it was told to quantise. One daemon run, canaries at
20/s and 5/s, one-second scrapes and evaluations: the whole test takes ~15 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from real_triton import RealTriton
from support import DaemonProcess, http_get, wait_until

pytestmark = [pytest.mark.real, pytest.mark.xdist_group("real_triton")]


def _config(path: Path, triton: RealTriton) -> Path:
    path.write_text(
        "scrape: {interval: 1s, timeout: 800ms}\n"
        "alerting: {evaluation_interval: 1s}\n"
        # A shared test host: its CPU may be busy with other tests, not saturated by ours.
        "advisor: {window: 10s, cpu_saturated_threshold: 0.99}\n"
        "canary: {rate: 20/s}\n"
        "slo: {latency: {threshold: 45ms, objective: 0.95}}\n"
        f"targets: [{{name: real, url: '{triton.http_url}', metrics_url: '{triton.metrics_url}',"
        " models: [{name: pipeline, slo: {latency: {threshold: 20ms}}},"
        " {name: bls, composing_models: [core], canary: {rate: 5/s}}]}]\n"
    )
    return path


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


def _recommended(daemon: DaemonProcess) -> set[tuple[str, str]]:
    return {
        (labels["model"], labels["action"])
        for labels, _ in _samples(daemon.metrics(), "tritonwatch_recommendation")
    }


def test_the_ensemble_and_the_bls_model_get_cores_queue_delay_lowered(
    tmp_path: Path, real_triton: RealTriton
) -> None:
    """Breaks if the ensemble's breakdown misses a step or does not name core's queue,
    if either pipeline's advice is anything but core's queue delay (the issue: nothing
    for the ensemble, optimize_model for the BLS model), or if core is exported as a
    watched model."""
    daemon = DaemonProcess(_config(tmp_path / "c.yaml", real_triton))
    try:
        via_pipeline = daemon.wait_for_event(
            "recommendation", timeout=40, model="core", pipeline="pipeline"
        )
        via_bls = daemon.wait_for_event("recommendation", timeout=20, model="core", pipeline="bls")
        wait_until(
            lambda: ("core", "lower_queue_delay") in _recommended(daemon), 10, "core's advice"
        )
        text = daemon.metrics()
        page = http_get(f"{daemon.url}/")[1]
        events = list(daemon.events)
    finally:
        daemon.stop()
    for advice, pipeline in ((via_pipeline, "pipeline"), (via_bls, "bls")):
        assert (advice["action"], advice["parameter"]) == (
            "lower_queue_delay",
            "max_queue_delay_microseconds",
        )
        assert (advice["current"], advice["proposed"]) == (20_000, 10_000)
        assert advice["reason"].startswith(f"{pipeline}'s p95 ")
        assert "core's queue" in advice["reason"]
    shown = {
        (labels["model"], labels["action"])
        for labels, _ in _samples(text, "tritonwatch_recommendation")
    }
    assert shown == {("core", "lower_queue_delay")}  # one, whichever pipeline found it
    assert not [
        e for e in events if e.get("event") == "recommendation" and e["action"] == "optimize_model"
    ]

    steps = {
        (labels["model"], labels["step"], labels["stage"]): value
        for labels, value in _samples(text, "tritonwatch_model_step_latency_seconds")
    }
    assert {step for model, step, _ in steps if model == "pipeline"} == {
        "prep",
        "core",
        "post",
        "pipeline",
    }
    assert steps[("pipeline", "core", "queue")] > 0.010  # ~20 ms: core's batching wait
    assert steps[("pipeline", "core", "queue")] > 5 * steps[("pipeline", "prep", "queue")]
    assert steps[("bls", "core", "queue")] > 0.020  # two calls, ~20 ms each
    necks = {
        labels["model"]: labels["kind"]
        for labels, value in _samples(text, "tritonwatch_model_bottleneck")
        if value == 1
    }
    assert necks == {"pipeline": "queue-bound", "bls": "queue-bound"}
    watched = {
        labels["model"] for labels, _ in _samples(text, "tritonwatch_model_requests_per_second")
    }
    assert watched == {"pipeline", "bls"}
    section = page[page.index('data-model="pipeline"') :]
    section = section[: section.index("</section>")]
    assert '<p class="steps">steps per request: prep ' in section
    assert "core&#x27;s queue takes" in section
    assert "<b>lower_queue_delay</b> core: max_queue_delay_microseconds: 20000 → 10000" in section
