"""Helpers for tests that run against the simulator (ours and other components').

Scrape parsing goes through ``prometheus_client``'s parser, which appends ``_total`` to
counter samples; ``Scrape`` undoes that so lookups use Triton's own names.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from tritonwatch.sim.builtin import BUILTIN_MODEL_SET, builtin_model_set
from tritonwatch.sim.models import ModelSet, ModelSpec, parse_model_set
from tritonwatch.sim.server import Simulator

SCRAPE_TIMEOUT_S = 5.0
DETERMINISTIC_TIMING: dict[str, Any] = {
    "compute_input": 0,
    "compute_input_per_item": 0,
    "compute_output": 0,
    "compute_output_per_item": 0,
    "compute_infer": "1ms",
    "compute_infer_per_item": "50us",
    "noise_sigma": 0,
}
"""A timing block without noise or host stages: compute_infer = 1 ms + 50 µs per item."""


def builtin_model(name: str) -> ModelSpec:
    """A model of the built-in set by name (KeyError when there is none)."""
    spec = builtin_model_set().model(name)
    if spec is None:
        raise KeyError(name)
    return spec


def model_set_with(**changes_by_model: dict[str, Any]) -> ModelSet:
    """The built-in model set with some top-level fields of some models replaced."""
    data = {
        "gpus": BUILTIN_MODEL_SET["gpus"],
        "models": [
            {**model, **changes_by_model.get(model["name"], {})}
            for model in BUILTIN_MODEL_SET["models"]
        ],
    }
    return parse_model_set(data, source="<test model set>")


def simple_inputs(
    module: Any, first: npt.NDArray[np.int32], second: npt.NDArray[np.int32], *, binary: bool = True
) -> list[Any]:
    """INPUT0/INPUT1 of the ``simple`` model for ``tritonclient.http`` or ``tritonclient.grpc``."""
    inputs = []
    for name, array in (("INPUT0", first), ("INPUT1", second)):
        tensor = module.InferInput(name, list(array.shape), "INT32")
        if module is httpclient:
            tensor.set_data_from_numpy(array, binary_data=binary)
        else:
            tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


@dataclass
class Scrape:
    """A parsed ``/metrics`` body: values by (sample name, labels), types, raw text."""

    text: str
    values: dict[tuple[str, frozenset[tuple[str, str]]], float]
    types: dict[str, str]

    def value(self, name: str, **labels: str) -> float:
        """The sample ``name`` with exactly ``labels`` (KeyError when absent)."""
        return self.values[(name, frozenset(labels.items()))]

    def model(self, name: str, model: str, version: str = "1") -> float:
        """A per-model sample."""
        return self.value(name, model=model, version=version)


def parse_scrape(text: str) -> Scrape:
    """Parses an exposition (raises ValueError on malformed text)."""
    values: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            name = sample.name
            if family.type == "counter":
                name = name.removesuffix("_total")
            values[(name, frozenset(sample.labels.items()))] = sample.value
    return Scrape(text, values, types)


def fetch(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> str:
    """GETs ``url`` and returns the body as text."""
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (test URLs)
        body: bytes = response.read()
    return body.decode()


def scrape(simulator: Simulator) -> Scrape:
    """Scrapes and parses the simulator's ``/metrics``."""
    return parse_scrape(fetch(simulator.metrics_url))


def wait_for(condition: Callable[[], bool], timeout_s: float = 5.0, step_s: float = 0.01) -> None:
    """Re-checks ``condition`` until it holds; raises TimeoutError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout_s} s")
        time.sleep(step_s)
