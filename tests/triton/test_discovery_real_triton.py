"""``tritonwatch run --url`` against a real tritonserver: every READY model is found
in the repository index (HTTP or gRPC) and watched; models loaded, unloaded or reloaded
with another config later follow."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

from real_triton import RealTriton
from support import TRITONWATCH, DaemonProcess, sample_value, wait_until

FIRST_THREE = ("batching", "needs_two", "text")  # text: a BYTES (TYPE_STRING) input
REFRESH = "500ms"


def _successes(
    daemon: DaemonProcess, target: str, model: str, protocol: str = "http"
) -> float | None:
    labels = [("target", target), ("model", model), ("protocol", protocol), ("outcome", "success")]
    return sample_value(daemon.metrics(), "tritonwatch_canary_requests_total", labels)


def _watch(url: str, server: RealTriton) -> DaemonProcess:
    """``tritonwatch run --url URL`` alone, re-reading the index every 500 ms."""
    return DaemonProcess(
        None,
        "--url", url,
        "--metrics-url", server.metrics_url,
        env={"TRITONWATCH_MODEL_REFRESH_INTERVAL": REFRESH},
    )  # fmt: skip


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
    daemon = _watch(f"http://{target}", server)
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


def test_a_grpc_only_target_discovers_over_repository_index_and_follows_loads(
    start_real_triton: Callable[..., RealTriton],
) -> None:
    """``--url grpc://`` alone: breaks if the gRPC RepositoryIndex is not read (or read
    wrong), a model loaded later is not watched over gRPC, or an unloaded one stays."""
    server = start_real_triton("batching")
    target = server.grpc_address
    daemon = _watch(server.grpc_url, server)
    try:
        wait_until(lambda: (_successes(daemon, target, "batching", "grpc") or 0) >= 1, 60, "found")
        assert _canary_models(daemon) == {"batching"}

        server.load("text")
        wait_until(lambda: (_successes(daemon, target, "text", "grpc") or 0) >= 1, 30, "loaded")
        discovered = daemon.wait_for_event("models_discovered", added=["text"])
        assert (discovered["target"], discovered["removed"]) == (target, [])

        server.unload("batching")
        wait_until(lambda: "batching" not in _canary_models(daemon), 30, "series removed")
        assert _canary_models(daemon) == {"text"}
    finally:
        assert daemon.stop() == 0


def test_a_model_reloaded_with_other_input_dims_gets_its_canary_rebuilt(
    start_real_triton: Callable[..., RealTriton],
) -> None:
    """Reloads ``batching`` with INPUT0 [8] (was [16]): Triton refuses the old [1, 16]
    request, so successes resume only if the canary read the new config and sends
    [1, 8]. Breaks if a reload goes unnoticed or the canary is not rebuilt."""
    server = start_real_triton("batching")
    target = f"127.0.0.1:{server.http_port}"
    daemon = _watch(f"http://{target}", server)
    try:
        wait_until(lambda: (_successes(daemon, target, "batching") or 0) >= 1, 60, "found")
        config = server.config("batching")
        for tensor in (*config["input"], *config["output"]):
            tensor["dims"] = [8]
        mark = len(daemon.events)
        server.load("batching", config)
        assert server.config("batching")["input"][0]["dims"] == [8]

        reloaded = daemon.wait_for_event("models_discovered", 30, mark, reloaded=["batching"])
        assert (reloaded["added"], reloaded["removed"]) == ([], [])
        daemon.wait_for_event("canary_started", 30, mark, model="batching")
        rebuilt = _successes(daemon, target, "batching") or 0
        wait_until(
            lambda: (_successes(daemon, target, "batching") or 0) >= rebuilt + 3,
            30,
            "successes with the new shape",
        )
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
