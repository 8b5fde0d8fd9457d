"""``tritonwatch demo``: the simulator and the daemon together, on loopback, one command.

Four models in four states — ``simple`` healthy, ``resnet50`` with a queue delay
that breaks a 50 ms budget, ``text_identity`` on an underused GPU, and ``llm``, a
vLLM-flavoured decoupled model whose streaming canary times TTFT and ITL against their
SLOs while the vLLM metric families feed the LLM readings — so that every part of
tritonwatch has something to show. Beside them, the simulator's built-in kinds: the
ensemble ``pipeline`` (``prep`` → ``core`` → ``post``, whose middle step waits on its
batcher), the stateful ``seq`` and the cache-enabled ``cached`` (the demo server has a
response cache). The simulator runs in this process (the built-in model set plus
``llm`` and the kinds, which stay out of the built-in set so that ``tritonwatch
simulate`` and the tests keep their three plain models); the daemon is the same
:class:`Daemon` that ``tritonwatch run`` starts.
"""

from __future__ import annotations

import json
import queue
import signal
import tempfile
from pathlib import Path

from rich.live import Live

from tritonwatch.commands.demo_view import demo_screen
from tritonwatch.common.logs import configure_logging, get_logger
from tritonwatch.config import load_config
from tritonwatch.runtime.daemon import Daemon
from tritonwatch.sim.builtin import BUILTIN_MODEL_SET, with_kind_models
from tritonwatch.sim.models import ModelSet, parse_model_set
from tritonwatch.sim.server import Simulator

DEMO_SCENARIOS = {
    "simple": "healthy",
    "resnet50": "queue-delay-too-high",
    "text_identity": "gpu-underused",
    "llm": "healthy",
}
DEMO_LLM = {
    "name": "llm",
    "max_batch_size": 0,
    "instance_group": {"count": 1, "kind": "KIND_GPU", "gpus": [3]},
    "llm": {"backend": "vllm"},
    "memory_per_instance": "6GiB",
}
"""A vLLM model at the simulator's default costs (about 8 ms a token), on a GPU of its own."""
DEMO_LLM_GPU = {"uuid": "GPU-51a7c0de-0000-4000-8000-000000000003"}


DEMO_MODELS = ("simple", "resnet50", "text_identity", "llm", "pipeline", "seq", "cached")
"""Every model the demo's config watches, in its order (the steps of ``pipeline`` are
read through it, not watched)."""
DEMO_CACHE_BYTES = 64 * 2**20
"""The demo server's response cache (``cached`` answers repeated requests from it)."""


def demo_model_set() -> ModelSet:
    """The built-in three models, :data:`DEMO_LLM` on a fourth GPU, and the built-in
    kinds (the ensemble ``pipeline`` of ``prep``/``core``/``post``, the stateful ``seq``
    and the cache-enabled ``cached``) on a fifth."""
    gpus = [*BUILTIN_MODEL_SET["gpus"], DEMO_LLM_GPU]
    models = [*BUILTIN_MODEL_SET["models"], DEMO_LLM]
    data = with_kind_models({"gpus": gpus, "models": models})
    return parse_model_set(data, source="<demo model set>")


def demo_config(sim: Simulator, folder: Path, listen: str) -> Path:
    """Writes the demo's config (and the text model's sample input) into ``folder``."""
    sample = folder / "text_identity.json"
    sample.write_text(json.dumps([["tritonwatch demo"]]))
    config = folder / "demo.yaml"
    config.write_text(
        f"""# Written by `tritonwatch demo`; a complete config for the built-in simulator.
targets:
  - name: demo
    url: {sim.http_url}
    grpc_url: grpc://{sim.grpc_url}
    metrics_url: {sim.metrics_url}
    service: demo
    price: {{per_gpu_hour: 2.5}}
    models:
      - name: simple
        sweep: {{enabled: true, interval: 30m, first_run_after: 30s, concurrency: [1, 2, 4, 8, 16]}}
      - name: resnet50
        canary: {{protocol: grpc}}
      - name: text_identity
        canary: {{inputs: {{INPUT0: {{file: {sample}}}}}}}
      - name: llm
        canary: {{rate: 2/s, stream: {{max_tokens: 32}}}}
        slo:
          latency: {{threshold: 1s}}
          ttft: {{threshold: 200ms, objective: 0.95}}
          itl: {{threshold: 50ms, objective: 0.95}}
      - name: pipeline
      - name: seq
      - name: cached
slo: {{latency: {{threshold: 50ms, objective: 0.95}}}}
canary: {{rate: 5/s}}
scrape: {{interval: 5s, timeout: 2s}}
exporter: {{listen: "{listen}"}}
"""
    )
    return config


def run_demo(listen: str, live: bool) -> int:
    """Runs until SIGINT/SIGTERM; returns the exit status.

    With ``live`` (a terminal), a table of every model redraws each second and the
    logs go to a file in the demo's folder; otherwise the logs are the output.
    """
    log = get_logger("demo")
    commands: queue.SimpleQueue[str] = queue.SimpleQueue()
    signal.signal(signal.SIGTERM, lambda *_: commands.put("stop"))
    signal.signal(signal.SIGINT, lambda *_: commands.put("stop"))
    with (
        Simulator(demo_model_set(), seed=0, response_cache_bytes=DEMO_CACHE_BYTES) as sim,
        tempfile.TemporaryDirectory(prefix="tritonwatch-demo-") as tmp,
    ):
        for model, scenario in DEMO_SCENARIOS.items():
            sim.set_scenario(scenario, model)
        path = demo_config(sim, Path(tmp), listen)
        log_file = (Path(tmp) / "tritonwatch.log").open("w", encoding="utf-8") if live else None
        if log_file is not None:
            configure_logging("json", "info", log_file)
        daemon = Daemon(path, load_config(path))
        daemon.start()
        log.info(
            "demo_running",
            exporter=f"{daemon.exporter_url}/metrics",
            health=f"{daemon.exporter_url}/health",
            status_page=f"{daemon.exporter_url}/",
            simulator_http=sim.http_url,
            simulator_metrics=sim.metrics_url,
            scenarios=DEMO_SCENARIOS,
            stop="Ctrl-C",
        )
        try:
            if log_file is None:
                commands.get()
            else:
                _live_view(daemon, commands)
        finally:
            daemon.stop()
            if log_file is not None:
                log_file.close()
    return 0


def _live_view(daemon: Daemon, commands: queue.SimpleQueue[str]) -> None:
    """Redraws the table every second until a stop command arrives."""
    with Live(
        demo_screen(daemon.status_snapshot(), daemon.exporter_url), refresh_per_second=2
    ) as view:
        while True:
            try:
                commands.get(timeout=1.0)
                return
            except queue.Empty:
                view.update(demo_screen(daemon.status_snapshot(), daemon.exporter_url))
