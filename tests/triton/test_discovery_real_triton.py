"""``tritonwatch run --url`` against a real tritonserver: every READY model is found
in the repository index (HTTP or gRPC) and watched; models loaded, unloaded or reloaded
with another config later follow.

On the session's server, which holds every test model: each daemon watches the models
its test names (``--models-include``), and each test loads what it unloaded and resets
what it reloaded, so the next test finds the server as it was."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from real_triton import RealTriton
from support import TRITONWATCH, DaemonProcess, sample_value, wait_until

pytestmark = pytest.mark.real

FIRST_THREE = ("batching", "needs_two", "text")  # text: a BYTES (TYPE_STRING) input
REFRESH = "500ms"


def _successes(
    daemon: DaemonProcess, target: str, model: str, protocol: str = "http"
) -> float | None:
    labels = [("target", target), ("model", model), ("protocol", protocol), ("outcome", "success")]
    return sample_value(daemon.metrics(), "tritonwatch_canary_requests_total", labels)


def _watch(url: str, server: RealTriton, *models: str) -> DaemonProcess:
    """``tritonwatch run --url URL`` watching ``models`` of the server (whichever of them
    are READY), re-reading the index every 500 ms."""
    return DaemonProcess(
        None,
        "--url", url,
        "--metrics-url", server.metrics_url,
        "--models-include", f"^({'|'.join(models)})$",
        env={"TRITONWATCH_MODEL_REFRESH_INTERVAL": REFRESH},
    )  # fmt: skip


def _ready(server: RealTriton) -> set[str]:
    """The models the server's repository index says are READY."""
    status, body = server.request("POST", "/v2/repository/index", {})
    assert status == 200, body
    return {entry["name"] for entry in json.loads(body) if entry.get("state") == "READY"}


@contextmanager
def _put_back(server: RealTriton, *unloaded: str) -> Iterator[None]:
    """Unloads ``unloaded`` first; at the end every model READY before is loaded again."""
    before = _ready(server)
    try:
        for model in unloaded:
            server.unload(model)
        wait_until(lambda: not _ready(server) & set(unloaded), 30, f"{unloaded} unloaded")
        yield
    finally:
        for model in sorted(before - _ready(server)):
            server.load(model)


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
    real_triton: RealTriton,
) -> None:
    """Discovery at start, a later load and an unload; breaks if the index is not read,
    not re-read, or a removed model's series are left behind."""
    server = real_triton
    target = f"127.0.0.1:{server.http_port}"
    with _put_back(server, "slow_queue"):
        daemon = _watch(f"http://{target}", server, *FIRST_THREE, "slow_queue")
        try:
            for model in FIRST_THREE:
                wait_until(lambda m=model: (_successes(daemon, target, m) or 0) >= 1, 60, model)
            assert _canary_models(daemon) == set(FIRST_THREE)

            server.load("slow_queue")
            wait_until(lambda: _successes(daemon, target, "slow_queue"), 30, "loaded")
            discovered = daemon.wait_for_event("models_discovered", added=["slow_queue"])
            assert discovered["removed"] == []

            server.unload("needs_two")
            wait_until(lambda: "needs_two" not in _canary_models(daemon), 30, "series removed")
            assert _canary_models(daemon) == {"batching", "text", "slow_queue"}
            assert _successes(daemon, target, "text") is not None
        finally:
            assert daemon.stop() == 0


def test_a_grpc_only_target_discovers_over_repository_index_and_follows_loads(
    real_triton: RealTriton,
) -> None:
    """``--url grpc://`` alone: breaks if the gRPC RepositoryIndex is not read (or read
    wrong), a model loaded later is not watched over gRPC, or an unloaded one stays."""
    server = real_triton
    target = server.grpc_address
    with _put_back(server, "text"):
        daemon = _watch(server.grpc_url, server, "batching", "text")
        try:
            wait_until(lambda: _successes(daemon, target, "batching", "grpc"), 60, "found")
            assert _canary_models(daemon) == {"batching"}

            server.load("text")
            wait_until(lambda: _successes(daemon, target, "text", "grpc"), 30, "loaded")
            discovered = daemon.wait_for_event("models_discovered", added=["text"])
            assert (discovered["target"], discovered["removed"]) == (target, [])

            server.unload("batching")
            wait_until(lambda: "batching" not in _canary_models(daemon), 30, "series removed")
            assert _canary_models(daemon) == {"text"}
        finally:
            assert daemon.stop() == 0


def test_a_model_reloaded_with_other_input_dims_gets_its_canary_rebuilt(
    real_triton: RealTriton,
) -> None:
    """Reloads ``batching`` with INPUT0 [8] (was [16]): Triton refuses the old [1, 16]
    request, so successes resume only if the canary read the new config and sends
    [1, 8]. Breaks if a reload goes unnoticed or the canary is not rebuilt."""
    server = real_triton
    target = f"127.0.0.1:{server.http_port}"
    daemon = _watch(f"http://{target}", server, "batching")
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
        try:
            assert daemon.stop() == 0
        finally:
            server.reset("batching")  # INPUT0 [16] again, for the session's other tests
    assert server.config("batching")["input"][0]["dims"] == [16]


def test_dry_run_prints_models_protocol_inputs_and_slos(real_triton: RealTriton) -> None:
    """``run --dry-run`` asks the server once; breaks if a READY model is left out or an
    excluded one listed, or if a model's inputs' datatypes and shapes, or its SLOs, are
    missing from what it prints."""
    server = real_triton
    url = f"http://127.0.0.1:{server.http_port}"
    result = subprocess.run(
        [TRITONWATCH, "run", "--url", url, "--models-exclude", "^needs", "--dry-run"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == [
        f"target 127.0.0.1:{server.http_port}: {url} (http), metrics http://127.0.0.1:8002/metrics",
        "  models: every READY model (exclude '^needs'), found",
    ]
    listed = [line.split()[1].rstrip(":") for line in lines if line.startswith("  model ")]
    assert listed == sorted(m for m in _ready(server) if not m.startswith("needs"))
    assert {"batching", "text"} <= set(listed)

    def block(model: str) -> list[str]:
        start = lines.index(next(line for line in lines if line.startswith(f"  model {model}:")))
        end = next((k for k in range(start + 1, len(lines)) if lines[k].startswith("  model ")),
                   len(lines))  # fmt: skip
        return lines[start:end]

    assert block("batching") == [
        "  model batching: canary http, 1/s",
        "    SLO latency: 95% under 50ms; availability: 99.9%; period 28d",
        "    input INPUT0: FP32 [1, 16]",
    ]
    assert block("text") == [
        "  model text: canary http, 1/s",
        "    SLO latency: 95% under 50ms; availability: 99.9%; period 28d",
        "    input TEXT: BYTES [1, 1]",
    ]
