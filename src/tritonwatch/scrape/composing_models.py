"""Which models a target's watched models compose, so that the scraper reads them too.

An ensemble names its steps in its config (``ensemble_scheduling.step[].model_name``),
and a step may itself be an ensemble whose own config names its steps: the walk goes on
through the steps' configs as the config API answers them. A BLS (Python) model's
children are named nowhere in Triton; tritonwatch's config names them
(``composing_models``, as Model Analyzer's ``bls_composing_models``).

The scraper reads every composing model's rates and config, even of a model it does not
watch, so that judgement can split a pipeline's time into its steps
(:mod:`tritonwatch.analysis.pipeline_breakdown`). They are published in
:attr:`~tritonwatch.records.target_state.TargetState.composing`, never as watched
models: nothing is exported for them under their own name.
"""

from __future__ import annotations

from collections.abc import Mapping

from tritonwatch.records.observations import ModelConfigSnapshot, ModelKey, ModelRates
from tritonwatch.records.target_state import ModelState

MAX_COMPOSING_MODELS = 64
"""At most this many composing models per target: a bound on the scrape's work and on
what one target keeps, whatever a repository of nested ensembles holds."""


def composing_names(
    declared: Mapping[str, tuple[str, ...]],
    configs: Mapping[str, ModelConfigSnapshot],
) -> tuple[str, ...]:
    """The models the watched ones compose, directly or through nested ensembles, that
    are not watched themselves; in the order they were found, at most
    :data:`MAX_COMPOSING_MODELS`.

    Args:
        declared: each watched model → its configured ``composing_models`` (BLS).
        configs: the configs read so far (watched and composing models): an ensemble's
            steps come from its config, so a step whose config is not read yet leads
            nowhere until it is.
    """
    seen: dict[str, None] = dict.fromkeys(declared)
    pending = list(declared)
    while pending:
        name = pending.pop(0)
        config = configs.get(name)
        steps = config.traits.ensemble_steps if config is not None else ()
        for child in (*declared.get(name, ()), *steps):
            if child in seen:
                continue
            if len(seen) - len(declared) >= MAX_COMPOSING_MODELS:
                return tuple(n for n in seen if n not in declared)
            seen[child] = None
            pending.append(child)
    return tuple(name for name in seen if name not in declared)


def composing_key(name: str) -> ModelKey:
    """A composing model stands for all its versions, as a step with ``model_version: -1``
    (the latest) does; their series are summed."""
    return ModelKey(name, "")


def composing_states(
    names: tuple[str, ...],
    rates: Mapping[ModelKey, ModelRates],
    configs: Mapping[str, ModelConfigSnapshot],
) -> dict[str, ModelState]:
    """The readings of each composing model: its rates over the scrape window and its
    config (either None when not read)."""
    return {
        name: ModelState(name, rates=rates.get(composing_key(name)), config=configs.get(name))
        for name in names
    }
