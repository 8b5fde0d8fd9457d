"""The simulator's state on its loop: GPUs, models, faults, readings — no sockets.

``SimCore`` is what both frontends (HTTP, gRPC), the metrics endpoint and the admin
endpoint talk to. Every method runs on the simulator's event loop; ``Simulator`` (in
``server.py``) forwards calls from other threads onto it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import numpy as np
import structlog

from tritonwatch.sim.cache import CacheReading, ResponseCache
from tritonwatch.sim.faults import Fault, FaultBook
from tritonwatch.sim.gpu import GpuScheduler, SharedGpu
from tritonwatch.sim.metrics import HostCpu, MetricsRenderer
from tritonwatch.sim.models import ModelSet
from tritonwatch.sim.repository import ModelRepository, ModelSlot
from tritonwatch.sim.scenarios import get_scenario

_log = structlog.get_logger(component="sim")
DEFAULT_METRICS_INTERVAL_S = 2.0
"""Triton's default ``--metrics-interval-ms`` (2000)."""


class SimCore:
    """All simulated state, owned by one event loop."""

    def __init__(
        self,
        model_set: ModelSet,
        *,
        loop: asyncio.AbstractEventLoop,
        scenario: str = "healthy",
        seed: int = 0,
        summary_latencies: bool = False,
        histogram_latencies: bool = False,
        metrics_interval_s: float = DEFAULT_METRICS_INTERVAL_S,
        model_control_mode: str = "explicit",
        response_cache_bytes: int | None = None,
        host_cpu_utilization: float | None = None,
    ) -> None:
        get_scenario(scenario)
        self.loop = loop
        self.model_set = model_set
        self.summary_latencies = summary_latencies
        self.histogram_latencies = histogram_latencies
        self.metrics_interval_s = metrics_interval_s
        self.started_wall = time.time()
        now = loop.time()
        rng = np.random.default_rng(seed)
        self.gpus = [SharedGpu(spec, now) for spec in model_set.gpus]
        self.schedulers = [GpuScheduler(gpu, loop) for gpu in self.gpus]
        self.faults = FaultBook(rng)
        self.cache = None if response_cache_bytes is None else ResponseCache(response_cache_bytes)
        """The server's response cache (Triton's ``--cache-config local,size=N``)."""
        self.cache_reading: CacheReading | None = None
        """The ``nv_cache_*`` gauges as of the last metrics poll (None without a cache)."""
        self.repository = ModelRepository(
            model_set,
            loop=loop,
            gpus=self.schedulers,
            faults=self.faults,
            rng=rng,
            summaries=summary_latencies,
            cache=self.cache,
        )
        self.repository.add_models(scenario)
        self.repository.model_control_mode = model_control_mode
        self.host = HostCpu(pinned_utilization=host_cpu_utilization)
        self.metrics = MetricsRenderer(
            self.repository,
            self.gpus,
            self.host,
            summaries=summary_latencies,
            histograms=histogram_latencies,
            cache=lambda: self.cache_reading,
        )
        self.restarts = 0
        self._poller: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Starts the GPU/CPU poller (one reading per metrics interval)."""
        self.poll()
        self._poller = self.loop.create_task(self._poll_forever(), name="sim-metrics-poller")

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.metrics_interval_s)
            self.poll()

    def poll(self) -> None:
        """Closes a metrics interval: GPU utilisation, power and energy; host CPU; the
        response cache's gauges."""
        now = self.loop.time()
        for gpu in self.gpus:
            gpu.sample(now)
        self.host.poll()
        if self.cache is not None:
            self.cache_reading = self.cache.reading()

    def render_metrics(self) -> str:
        """The ``/metrics`` body now."""
        return self.metrics.render(self.loop.time())

    # -- admin ------------------------------------------------------------------------

    def set_scenario(self, name: str, model: str | None = None) -> None:
        """Switches ``model`` (or every model) to scenario ``name``."""
        self.repository.set_scenario(name, model)
        _log.info("scenario set", scenario=name, model=model or "*")

    def inject_fault(self, fault: Fault) -> int:
        """Puts a fault in force; returns its id."""
        fault_id = self.faults.add(fault, self.loop.time())
        _log.info("fault injected", fault=fault.model_dump())
        return fault_id

    def clear_faults(self) -> None:
        """Lifts every fault (hung requests resume)."""
        self.faults.clear()
        _log.info("faults cleared")

    def restart(self) -> None:
        """Resets every counter to zero, as a Triton restart does; models stay loaded."""
        now = self.loop.time()
        self.repository.reset_counters()
        if self.cache is not None:  # a new process starts with an empty cache
            self.cache.reset()
            self.cache_reading = self.cache.reading()
        for gpu in self.gpus:
            gpu.reset_counters(now)
        self.started_wall = time.time()
        self.restarts += 1
        _log.info("simulated restart", restarts=self.restarts)

    def state(self) -> dict[str, Any]:
        """``GET /sim/state``: models with scenario and instances, GPUs, faults."""
        now = self.loop.time()
        models = []
        for name in self.repository.names():
            slot = self.repository.slot(name)
            models.append(
                {
                    "name": name,
                    "version": slot.spec.version_label,
                    "state": "READY" if slot.runtime is not None else "UNAVAILABLE",
                    "scenario": slot.scenario,
                    "instance_count": slot.spec.instance_group.count,
                    "max_batch_size": slot.spec.max_batch_size,
                    "max_queue_delay_microseconds": (
                        None
                        if slot.spec.dynamic_batching is None
                        else slot.spec.dynamic_batching.max_queue_delay_microseconds
                    ),
                    "pending": self.repository.pending(name),
                    **self._llm_state(slot),
                }
            )
        gpus = []
        for gpu in self.gpus:
            sample = gpu.last_sample()
            gpus.append(
                {
                    "uuid": gpu.spec.uuid,
                    "utilization": sample.utilization,
                    "background_occupancy": gpu.background,
                    "memory_used_bytes": sample.memory_used_bytes,
                    "memory_total_bytes": gpu.spec.memory_total,
                    "power_watts": sample.power_watts,
                    "energy_joules": sample.energy_joules,
                }
            )
        return {
            "simulator": "tritonwatch",
            "restarts": self.restarts,
            "summary_latencies": self.summary_latencies,
            "histogram_latencies": self.histogram_latencies,
            "metrics_interval_s": self.metrics_interval_s,
            "models": models,
            "gpus": gpus,
            "faults": self.faults.describe(now),
        }

    @staticmethod
    def _llm_state(slot: ModelSlot) -> dict[str, Any]:
        """An LLM model's engine in ``/sim/state``: sequences, KV blocks, preemptions."""
        engine = None if slot.runtime is None else slot.runtime.llm
        if engine is None:
            return {}
        return {
            "llm": {
                "running": len(engine.running),
                "waiting": len(engine.waiting),
                "kv_blocks_used": engine.kv_blocks_used,
                "kv_blocks": engine.spec.kv_blocks,
                "preemptions": engine.counters.preemptions,
            }
        }

    async def close(self) -> None:
        """Stops the poller and every model; releases anything a hang holds."""
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        self.faults.clear()
        await self.repository.close()
