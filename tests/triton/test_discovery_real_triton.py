"""``tritonwatch run --url`` against a real tritonserver: every READY model is found
in the repository index and watched; models loaded or unloaded later follow."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

from real_triton import RealTriton
from support import TRITONWATCH, DaemonProcess, sample_value, wait_until

FIRST_THREE = ("batching", "needs_two", "text")  # text: a BYTES (TYPE_STRING) input
REFRESH = "500ms"


def _successes(daemon: DaemonProcess, target: str, model: str) -> float | None:
    labels = [("target", target), ("model", model), ("outcome", "success")]
    return sample_value(daemon.metrics(), "tritonwatch_canary_requests_total", labels)


def _canary_models(daemon: DaemonProcess) -> set[str]:
    """The models that have any ``tritonwatch_canary_*`` series on /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        sample.labels["model"]
        for family in text_string_to_metric_families(daemon.metrics())
        if family.name.startswith("tritonwatch_canary_")
        for sample in family.samples
        if "model" in sample.labels
    }


def test_run_url_alone_watches_every_ready_model_and_follows_loads(
    start_real_triton: Callable[..., RealTriton],
) -> None:
    """Discovery at start, a later load and an unload; breaks if the index is not read,
    not re-read, or a removed model's series are left behind."""
    server = start_real_triton(*FIRST_THREE)
    target = f"127.0.0.1:{server.http_port}"
    daemon = DaemonProcess(
        None,
        "--url", f"http://{target}",
        "--metrics-url", server.metrics_url,
        env={"TRITONWATCH_MODEL_REFRESH_INTERVAL": REFRESH},
    )  # fmt: skip
    try:
        for model in FIRST_THREE:
            wait_until(lambda m=model: (_successes(daemon, target, m) or 0) >= 1, 60, model)
        assert _canary_models(daemon) == set(FIRST_THREE)

        server.load("slow_queue")
        wait_until(lambda: (_successes(daemon, target, "slow_queue") or 0) >= 1, 30, "loaded")
        discovered = daemon.wait_for_event("models_discovered", added=["slow_queue"])
        assert discovered["removed"] == []

        server.unload("needs_two")
        wait_until(lambda: "needs_two" not in _canary_models(daemon), 30, "series removed")
        assert _canary_models(daemon) == {"batching", "text", "slow_queue"}
        assert _successes(daemon, target, "text") is not None
    finally:
        assert daemon.stop() == 0


def test_dry_run_prints_models_protocol_inputs_and_slos(
    start_real_triton: Callable[..., RealTriton],
) -> None:
    """``run --dry-run`` asks the server once; breaks if a model, its inputs' datatypes
    and shapes, or its SLOs are missing from what it prints."""
    server = start_real_triton("batching", "text", "needs_two")
    url = f"http://127.0.0.1:{server.http_port}"
    result = subprocess.run(
        [TRITONWATCH, "run", "--url", url, "--models-exclude", "^needs", "--dry-run"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines == [
        f"target 127.0.0.1:{server.http_port}: {url} (http), metrics http://127.0.0.1:8002/metrics",
        "  models: every READY model (exclude '^needs'), found",
        "  model batching: canary http, 1/s",
        "    SLO latency: 95% under 50ms; availability: 99.9%; period 28d",
        "    input INPUT0: FP32 [1, 16]",
        "  model text: canary http, 1/s",
        "    SLO latency: 95% under 50ms; availability: 99.9%; period 28d",
        "    input TEXT: BYTES [1, 1]",
    ]
