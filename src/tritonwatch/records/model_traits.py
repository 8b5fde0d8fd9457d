"""What kind of model a Triton config describes: the traits that change how it is measured.

A pure reading of ``GET v2/models/{m}/config`` (a JSON object, snake_case, defaults
printed), shared by the canary (which request to send) and the scraper (which
breakdown to make); docs/design.md §4b has the facts it builds on:

* an **ensemble** (``platform: "ensemble"``) names its steps in
  ``ensemble_scheduling.step[].model_name``; a step may itself be an ensemble, which
  only the steps' own configs tell (:func:`ensemble_steps` reads one level);
* a **Python-backend** model (``backend: "python"``) computes in Python code and
  whatever it calls (BLS children included): quantisation or TensorRT cannot help it;
* a **sequence-batching** (stateful) model needs a correlation id and the START flag;
* a model with ``response_cache.enable`` answers repeated inputs from Triton's cache;
* a **decoupled** model (``model_transaction_policy.decoupled``) streams its responses
  after ``execute()`` returns, so Triton's request statistics end before the client's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

SequenceStrategy = Literal["direct", "oldest", "none"]

DEFAULT_MAX_SEQUENCE_IDLE_MICROSECONDS = 1_000_000
"""Triton's default for ``sequence_batching.max_sequence_idle_microseconds`` (1 s)."""


@dataclass(frozen=True, slots=True)
class SequenceBatching:
    """A stateful model's sequence batcher, as its config prints it.

    ``strategy`` is ``direct``, ``oldest``, or ``none`` where the config names neither
    (Triton then uses ``direct``); ``max_sequence_idle_microseconds`` is how long a
    sequence may wait between requests before Triton releases it (0 in the config means
    Triton's default, 1 s); ``iterative`` is ``iterative_sequence``.
    """

    strategy: SequenceStrategy
    max_sequence_idle_microseconds: int
    iterative: bool

    @property
    def max_idle_seconds(self) -> float:
        return self.max_sequence_idle_microseconds / 1e6


@dataclass(frozen=True, slots=True)
class ModelTraits:
    """The measuring-relevant traits of one model (all false for a plain model, or for a
    server without the config API)."""

    platform: str = ""
    backend: str = ""
    ensemble_steps: tuple[str, ...] = ()
    """The composing models of an ensemble, in step order, each once."""
    sequence: SequenceBatching | None = None
    response_cache: bool = False
    decoupled: bool = False

    @property
    def ensemble(self) -> bool:
        return self.platform == "ensemble"

    @property
    def python_backend(self) -> bool:
        """Its compute is Python code (and whatever it calls): no model-level optimisation
        (quantisation, TensorRT, fusion) applies to it."""
        return self.backend == "python"

    @property
    def stateful(self) -> bool:
        return self.sequence is not None


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _microseconds(value: Any) -> int:
    """A uint64 field, printed as a number or (protobuf's JSON printer) a string."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(0, value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return 0


def ensemble_step_counts(config: Mapping[str, Any]) -> dict[str, int]:
    """The model names of ``ensemble_scheduling.step`` → how many steps name each, in
    step order (a model named by two steps runs twice per request)."""
    steps = _object(config.get("ensemble_scheduling")).get("step")
    counts: dict[str, int] = {}
    for step in steps if isinstance(steps, list) else []:
        name = _object(step).get("model_name")
        if isinstance(name, str) and name:
            counts[name] = counts.get(name, 0) + 1
    return counts


def ensemble_steps(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The model names of ``ensemble_scheduling.step``, in order, each once."""
    return tuple(ensemble_step_counts(config))


def _sequence_batching(config: Mapping[str, Any]) -> SequenceBatching | None:
    raw = config.get("sequence_batching")
    if not isinstance(raw, Mapping):
        return None
    strategy: SequenceStrategy = "none"
    if isinstance(raw.get("oldest"), Mapping):
        strategy = "oldest"
    elif isinstance(raw.get("direct"), Mapping):
        strategy = "direct"
    idle = _microseconds(raw.get("max_sequence_idle_microseconds"))
    return SequenceBatching(
        strategy=strategy,
        max_sequence_idle_microseconds=idle or DEFAULT_MAX_SEQUENCE_IDLE_MICROSECONDS,
        iterative=raw.get("iterative_sequence") is True,
    )


def model_traits(config: Mapping[str, Any] | None) -> ModelTraits:
    """The traits of a model config document; a plain model's for None (no config API)
    or for anything that is not a JSON object."""
    if not isinstance(config, Mapping):
        return ModelTraits()
    platform = config.get("platform")
    backend = config.get("backend")
    policy = _object(config.get("model_transaction_policy"))
    return ModelTraits(
        platform=platform if isinstance(platform, str) else "",
        backend=backend if isinstance(backend, str) else "",
        ensemble_steps=ensemble_steps(config),
        sequence=_sequence_batching(config),
        response_cache=_object(config.get("response_cache")).get("enable") is True,
        decoupled=policy.get("decoupled") is True,
    )
