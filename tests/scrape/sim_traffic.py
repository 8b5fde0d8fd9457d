"""Traffic and clocks for the scrape tests that run against the simulator."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import tritonclient.http as httpclient

from tritonwatch.config.schema import TargetConfig
from tritonwatch.sim.core import SimCore
from tritonwatch.sim.load import as_request, example_inputs
from tritonwatch.sim.server import Simulator
from tritonwatch.sim.testing import builtin_model


class FakeClock:
    """Monotonic seconds that move only when a test says so: rates become exact."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def sim_target(sim: Simulator, *models: str, name: str = "sim") -> TargetConfig:
    """A target config pointing at ``sim``, watching ``models``."""
    return TargetConfig.model_validate(
        {
            "name": name,
            "url": sim.http_url,
            "metrics_url": sim.metrics_url,
            "models": [{"name": model} for model in models],
        }
    )


@contextmanager
def http_client(sim: Simulator) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(sim.http_url.removeprefix("http://"))
    try:
        yield client
    finally:
        client.close()


def infer(sim: Simulator, model: str, count: int, batch_size: int = 1) -> list[float]:
    """Sends ``count`` requests of ``batch_size`` rows one after another with the real
    ``tritonclient.http``; returns each one's end-to-end seconds. One at a time, so every
    request executes alone and the batch sizes the server sees are exactly these."""
    arrays = example_inputs(builtin_model(model), batch_size)
    latencies = []
    with http_client(sim) as client:
        for _ in range(count):
            tensors: list[Any] = []
            for name, (datatype, array) in arrays.items():
                tensor = httpclient.InferInput(name, list(array.shape), datatype)
                tensor.set_data_from_numpy(array)
                tensors.append(tensor)
            started = time.perf_counter()
            client.infer(model, tensors)
            latencies.append(time.perf_counter() - started)
    return latencies


def infer_in_process(sim: Simulator, model: str, count: int) -> list[float]:
    """Sends ``count`` requests one after another in process (on virtual time with a
    ``clock="virtual"`` simulator); returns each one's end-to-end seconds, the network
    delay a scenario adds after Triton's timers stop included, as the frontends add it."""

    async def one_at_a_time(core: SimCore) -> list[float]:
        inputs = as_request(example_inputs(core.repository.slot(model).spec))
        latencies = []
        for _ in range(count):
            started = core.loop.time()
            outcome = await core.repository.infer(model, "", inputs)
            await asyncio.sleep(outcome.network_delay_s)
            latencies.append(core.loop.time() - started)
        return latencies

    return sim.run_async(one_at_a_time)


class MeasuredCanary:
    """Stands in for the canary's totals: the latencies a test measured itself."""

    def __init__(self, target: str = "sim") -> None:
        self.target = target
        self.sums: dict[tuple[str, str], tuple[float, int]] = {}

    def add(self, model: str, latencies: list[float]) -> None:
        seconds, count = self.sums.get((self.target, model), (0.0, 0))
        self.sums[(self.target, model)] = (seconds + sum(latencies), count + len(latencies))

    def __call__(self) -> dict[tuple[str, str], tuple[float, int]]:
        return dict(self.sums)
