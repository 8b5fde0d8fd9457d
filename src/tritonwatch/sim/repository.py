"""The model repository: what is loaded, with which configuration, under which scenario.

Protocol-neutral: the HTTP and gRPC frontends call the same methods and turn
``SimError`` into their own error answers. Runs entirely on the simulator's loop.

A model's configuration comes from three layers: the model set (``base``), the scenario
applied to it, and the last configuration a client loaded (explicit model control).
Switching scenario drops a loaded override; loading a configuration keeps the scenario's
cost model. As in Triton, a load that changes only instance counts is applied in place;
any other change loads a new model beside the old one, sends new requests to it, and
lets the old one finish what it holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import structlog

from tritonwatch.sim import model_config
from tritonwatch.sim.batcher import ModelRuntime
from tritonwatch.sim.cache import ResponseCache
from tritonwatch.sim.dispatch import run_request
from tritonwatch.sim.ensemble import response_parameters
from tritonwatch.sim.errors import (
    ErrorCode,
    SimError,
    statistics_unavailable,
    unavailable_model,
    unknown_model,
)
from tritonwatch.sim.faults import FaultBook
from tritonwatch.sim.gpu import GpuScheduler, OutOfGpuMemoryError
from tritonwatch.sim.model_kinds import ResolvedStep, check_batch_sizes, resolve_steps
from tritonwatch.sim.models import ModelSet, ModelSpec
from tritonwatch.sim.scenarios import ScenarioContext, ScenarioEffect, get_scenario
from tritonwatch.sim.sequences import NO_SEQUENCE, SequenceFlags
from tritonwatch.sim.stats import Ledger, ModelSeries
from tritonwatch.sim.tensors import Array, RequestInput, prepare_inputs

_log = structlog.get_logger(component="sim")
DRAIN_TIMEOUT_S = 30.0
_ERROR_REASONS = {
    "REJECTED": (ErrorCode.UNAVAILABLE, "Exceeds maximum queue size"),
    "CANCELED": (ErrorCode.CANCELLED, "Request was cancelled"),
    "OTHER": (ErrorCode.INVALID_ARG, "simulated request failure"),
}


@dataclass
class ModelSlot:
    """One model name in the repository, loaded or not."""

    base: ModelSpec
    scenario: str
    effect: ScenarioEffect
    spec: ModelSpec
    config: Any
    series: ModelSeries
    runtime: ModelRuntime | None = None


@dataclass(frozen=True)
class InferOutcome:
    """A successful inference, ready for a frontend to encode."""

    spec: ModelSpec
    outputs: dict[str, Array]
    network_delay_s: float
    parameters: dict[str, int | str | bool] | None = None
    """Response parameters (an ensemble's sequence_id/sequence_start/sequence_end)."""


class ModelRepository:
    """Owns every model slot, its runtime and its scenario (see the module docstring)."""

    def __init__(
        self,
        model_set: ModelSet,
        *,
        loop: asyncio.AbstractEventLoop,
        gpus: list[GpuScheduler],
        faults: FaultBook,
        rng: np.random.Generator,
        summaries: bool,
        cache: ResponseCache | None = None,
    ) -> None:
        self._model_set = model_set
        self.cache = cache
        """The server's response cache (``--cache-config``), or None when it has none."""
        self._loop = loop
        self._gpus = gpus
        self._faults = faults
        self._rng = rng
        self._summaries = summaries
        self._slots: dict[str, ModelSlot] = {}
        self.model_control_mode = "explicit"
        """Triton's ``--model-control-mode``: only ``explicit`` accepts load and unload."""
        self._retiring: set[asyncio.Task[None]] = set()

    # -- lookup -----------------------------------------------------------------------

    def names(self) -> list[str]:
        """Every model name, loaded or not, in model-set order."""
        return list(self._slots)

    def slot(self, name: str) -> ModelSlot:
        """The slot of ``name`` (raises NOT_FOUND for an unknown model)."""
        slot = self._slots.get(name)
        if slot is None:
            raise unknown_model(name)
        return slot

    def runtime(self, name: str, version: str = "") -> ModelRuntime:
        """The loaded runtime of ``name`` (raises for unknown, unloaded or wrong version)."""
        slot = self.slot(name)
        if version and version != slot.spec.version_label:
            raise unknown_model(name, version)
        if slot.runtime is None:
            raise unavailable_model(name)
        return slot.runtime

    def loaded(self) -> list[ModelSlot]:
        """Slots with a runtime (their metrics series are exported)."""
        return [slot for slot in self._slots.values() if slot.runtime is not None]

    def pending(self, name: str) -> int:
        """Requests queued for ``name``, including in a model that is being replaced."""
        slot = self._slots[name]
        return 0 if slot.runtime is None else slot.runtime.pending

    # -- answers ----------------------------------------------------------------------

    def metadata(self, name: str, version: str = "") -> dict[str, Any]:
        """``GET v2/models/{m}[/versions/{v}]``."""
        return model_config.model_metadata(self.runtime(name, version).spec)

    def config(self, name: str, version: str = "") -> Any:
        """The loaded ModelConfig protobuf."""
        self.runtime(name, version)
        return self._slots[name].config

    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """``GET v2/models[/{m}[/versions/{v}]]/stats`` (its own INVALID_ARG errors)."""
        if name:
            try:
                runtime = self.runtime(name, version)
            except SimError:
                raise statistics_unavailable(name, version) from None
            return {"model_stats": [runtime.stats.stats_json(name, runtime.spec.version_label)]}
        return {  # by name, as Triton lists them
            "model_stats": [
                slot.runtime.stats.stats_json(slot.spec.name, slot.spec.version_label)
                for slot in sorted(self.loaded(), key=lambda slot: slot.spec.name)
                if slot.runtime is not None
            ]
        }

    def index(self, *, ready_only: bool = False) -> list[dict[str, Any]]:
        """``POST v2/repository/index``: every model with its state, by name (Triton lists
        its repository folder sorted)."""
        entries = []
        for name, slot in sorted(self._slots.items()):
            if slot.runtime is not None:
                entries.append({"name": name, "version": slot.spec.version_label, "state": "READY"})
            elif not ready_only:
                entries.append(
                    {
                        "name": name,
                        "version": slot.spec.version_label,
                        "state": "UNAVAILABLE",
                        "reason": "unloaded",
                    }
                )
        return entries

    # -- inference --------------------------------------------------------------------

    async def infer(
        self,
        name: str,
        version: str,
        inputs: Sequence[RequestInput],
        *,
        outputs: Sequence[str] = (),
        request_id: str = "",
        sequence: SequenceFlags = NO_SEQUENCE,
    ) -> InferOutcome:
        """Runs one request: through the model's batcher, its ensemble steps, its
        sequence, or the response cache.

        Args:
            name: model name.
            version: requested version ("" for the loaded one).
            inputs: the input tensors as the request states them.
            outputs: the output names the request asks for (checked like Triton).
            request_id: the request's ``id``, named in Triton's error messages.
            sequence: the request's correlation id and START/END flags.

        Raises:
            SimError: unknown model, invalid input, a refused sequence request, or an
                injected failure. As in Triton, a request refused by validation is
                counted nowhere.
        """
        arrival = self._loop.time()
        runtime = self.runtime(name, version)
        spec = runtime.spec
        batch_size, arrays = prepare_inputs(spec, inputs, outputs, request_id)
        if runtime.sequences is not None:
            runtime.sequences.check(sequence, batch_size)
        doomed = self.draw_failure(runtime, arrival)
        result, _ = await run_request(
            self, runtime, arrays, batch_size, arrival, doomed=doomed, sequence=sequence
        )
        parameters = response_parameters(sequence) if spec.is_ensemble else None
        return InferOutcome(spec, result, spec.timing.network_delay / 1e6, parameters)

    def steps(self, spec: ModelSpec) -> tuple[ResolvedStep, ...]:
        """An ensemble's steps, resolved against the models as loaded now."""
        try:
            return resolve_steps(spec, self._spec_of)
        except ValueError as error:
            raise SimError(
                ErrorCode.INTERNAL, f"ensemble '{spec.name}' cannot run: {error}"
            ) from None

    def _spec_of(self, name: str) -> ModelSpec | None:
        slot = self._slots.get(name)
        return None if slot is None else slot.spec

    def draw_failure(self, runtime: ModelRuntime, arrival: float) -> bool:
        """Draws the error-burst fault for a request that arrived at ``arrival``.

        Returns:
            True when a BACKEND failure is drawn (the request runs, then fails).

        Raises:
            SimError: a REJECTED, CANCELED or OTHER failure, counted under its reason.
        """
        reason = self._faults.failure_reason(runtime.spec.name, arrival)
        if reason is not None and reason != "BACKEND":
            runtime.record_failure(reason, self._loop.time() - arrival)
            code, message = _ERROR_REASONS[reason]
            raise SimError(code, message)
        return reason == "BACKEND"

    # -- loading ----------------------------------------------------------------------

    def _context(self, spec: ModelSpec) -> ScenarioContext:
        if spec.instance_group.kind == "KIND_CPU":
            return ScenarioContext(None)
        index = spec.instance_group.gpus[0]
        sharing = sum(
            1
            for slot in self._slots.values()
            if slot.base.instance_group.kind == "KIND_GPU"
            and index in slot.base.instance_group.gpus
        )
        return ScenarioContext(self._model_set.gpus[index], max(1, sharing))

    def _start_runtime(self, spec: ModelSpec, series: ModelSeries) -> ModelRuntime:
        group = spec.instance_group
        gpus: list[GpuScheduler | None] = (
            [self._gpus[index] for index in group.gpus]
            if group.kind == "KIND_GPU" and not spec.is_ensemble
            else [None]
        )
        try:
            return ModelRuntime(
                spec,
                loop=self._loop,
                gpus=gpus,
                series=series,
                faults=self._faults,
                rng=self._rng,
                summaries=self._summaries,
            )
        except OutOfGpuMemoryError as error:
            raise SimError(
                ErrorCode.INTERNAL,
                f"failed to load '{spec.name}' version {spec.version}: Internal: {error}",
            ) from None

    def _retire(self, runtime: ModelRuntime) -> None:
        async def finish() -> None:
            await runtime.drain(DRAIN_TIMEOUT_S)
            await runtime.close()

        task = self._loop.create_task(finish())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    def add_models(self, scenario: str) -> None:
        """Loads every model of the model set under ``scenario`` (at start)."""
        for base in self._model_set.models:
            self._slots[base.name] = ModelSlot(
                base=base,
                scenario=scenario,
                effect=ScenarioEffect(base),
                spec=base,
                config=None,  # set by _apply_scenario below
                series=ModelSeries(base.name, base.version_label),
            )
        for slot in self._slots.values():
            self._apply_scenario(slot, scenario)
        self._refresh_background()

    def _apply_scenario(self, slot: ModelSlot, scenario: str) -> None:
        effect = get_scenario(scenario).apply(slot.base, self._context(slot.base))
        slot.scenario, slot.effect = scenario, effect
        steps = self.steps(effect.spec) if effect.spec.is_ensemble else None
        self._install(slot, effect.spec, model_config.build_config(effect.spec, steps))

    def _install(self, slot: ModelSlot, spec: ModelSpec, config: Any) -> None:
        """Makes ``spec``/``config`` the loaded model, in place when only counts change."""
        old = slot.runtime
        # An LLM engine is built with its spec (KV pool, sequence limit), which the config
        # does not show: a changed engine is a reload, not an in-place count change.
        if (
            old is not None
            and old.spec.llm == spec.llm
            and model_config.only_instance_count_differs(slot.config, config)
        ):
            # The new spec first: its per-instance footprint may differ too (a scenario).
            previous, old.spec = old.spec, spec
            try:
                old.set_instance_count(spec.instance_group.count)
            except OutOfGpuMemoryError as error:
                old.spec = previous
                old.set_instance_count(slot.spec.instance_group.count)
                raise SimError(
                    ErrorCode.INTERNAL, f"failed to load '{spec.name}': {error}"
                ) from None
        else:
            if old is None:  # as in Triton, a model (re)loaded after an unload counts from 0
                slot.series = ModelSeries(spec.name, spec.version_label)
            slot.runtime = self._start_runtime(spec, slot.series)
            if old is not None:
                self._retire(old)
        slot.spec, slot.config = spec, config

    def set_scenario(self, scenario: str, model: str | None = None) -> None:
        """Applies ``scenario`` to ``model`` (or to every model); reloads what changes."""
        get_scenario(scenario)
        targets = [self.slot(model)] if model is not None else list(self._slots.values())
        for slot in targets:
            if slot.runtime is not None:
                self._apply_scenario(slot, scenario)
            else:
                slot.scenario = scenario
        self._refresh_background()

    def _refresh_background(self) -> None:
        background = [0.0] * len(self._gpus)
        for slot in self.loaded():
            if slot.spec.instance_group.kind == "KIND_GPU":
                for index in slot.spec.instance_group.gpus:
                    background[index] = max(background[index], slot.effect.gpu_background)
        for scheduler, occupancy in zip(self._gpus, background, strict=True):
            if scheduler.gpu.background != occupancy:
                scheduler.set_background(occupancy)

    def _require_explicit_mode(self) -> None:
        if self.model_control_mode != "explicit":
            raise SimError(  # 503 from real Triton 2.51 in modes none and poll
                ErrorCode.UNAVAILABLE,
                "explicit model load / unload is not allowed if polling is enabled",
            )

    def load(self, name: str, config_text: str | None) -> None:
        """``POST v2/repository/models/{m}/load`` with an optional configuration override.

        As in Triton, a model outside the repository (here: the model set) cannot be
        loaded, a load without a configuration leaves a loaded model as it is (override
        included), and a refused configuration leaves the loaded model serving.

        Raises:
            SimError: INTERNAL with Triton's "failed to poll" message for an unknown model
                or a bad configuration (the cause is logged), or no room on the GPU.
        """
        self._require_explicit_mode()
        try:
            self._load(name, config_text)
        except SimError as error:
            if error.detail:
                _log.warning("load refused", model=name, reason=error.detail)
            raise

    def _load(self, name: str, config_text: str | None) -> None:
        slot = self._slots.get(name)
        if slot is None:
            raise model_config.load_failed(name, f"no model '{name}' in the model set")
        if config_text is None:
            if slot.runtime is None:
                self._apply_scenario(slot, slot.scenario)
                self._refresh_background()
            return
        config = model_config.parse_override(name, config_text)
        model_config.add_implicit_instance_group(config, slot.effect.spec)
        spec = model_config.spec_from_config(slot.effect.spec, config)
        if spec.is_ensemble:  # Triton refuses an ensemble whose steps do not fit
            try:
                resolve_steps(spec, self._spec_of)
                check_batch_sizes(spec, self._spec_of)
            except ValueError as error:
                raise model_config.load_failed(name, f"invalid ensemble: {error}") from None
        self._install(slot, spec, config)
        self._refresh_background()

    def unload(self, name: str) -> None:
        """``POST v2/repository/models/{m}/unload``: new requests fail, queued ones finish.
        Unloading a model that is unknown or not loaded succeeds, as in Triton."""
        self._require_explicit_mode()
        slot = self._slots.get(name)
        if slot is None:
            return
        if slot.runtime is not None:
            self._retire(slot.runtime)
            slot.runtime = None
        self._refresh_background()

    # -- owner operations -------------------------------------------------------------

    def reset_counters(self) -> None:
        """Zeroes statistics and metrics of every model, as a server restart does."""
        for slot in self._slots.values():
            slot.series.reset()
            if slot.runtime is not None:
                slot.runtime.stats = Ledger()

    async def close(self) -> None:
        """Stops every runtime at once (pending requests fail)."""
        runtimes = [slot.runtime for slot in self._slots.values() if slot.runtime is not None]
        for slot in self._slots.values():
            slot.runtime = None
        for task in list(self._retiring):
            task.cancel()
        await asyncio.gather(
            *(runtime.close() for runtime in runtimes), *self._retiring, return_exceptions=True
        )
