"""What a pipeline is made of, and how often each part runs per pipeline request.

Pure functions of scraped records (docs/design.md §4b):

* an **ensemble** runs each of its steps once per request (a model named by two steps
  twice); a step that is itself an ensemble is replaced by its own steps, recursively,
  with the counts multiplied, so a pipeline's steps are the models that execute. The
  nested ensemble's own hand-offs stay in the outer pipeline's ``own`` time.
* a **BLS** model calls its ``composing_models`` (tritonwatch's config names them) as
  often as its Python decides: the calls per parent request are inferred from request
  rates by :func:`calls_per_request`, whose rule is below.

Every time is a per-request **average** of the step (Δduration / Δrequests over the
window), never a sum of counters: a step's counters also count its other callers (our
own canary on the step, another pipeline), and an average is the same whoever called.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tritonwatch.records.model_traits import ensemble_step_counts
from tritonwatch.records.observations import ModelRates
from tritonwatch.records.target_state import ModelState, PipelineKind, TargetState

MAX_DEPTH = 8
"""Nested ensembles deeper than this are cut off (a loop in configs cannot recur forever)."""


@dataclass(frozen=True, slots=True)
class Reading:
    """One model's per-request averages (seconds) and request rate over one window;
    None where unknown (no request completed, the family missing)."""

    request: float | None = None
    queue: float | None = None
    compute_input: float | None = None
    compute_infer: float | None = None
    compute_output: float | None = None
    requests_per_second: float | None = None

    @classmethod
    def of_rates(cls, rates: ModelRates | None) -> Reading:
        if rates is None:
            return cls()
        return cls(
            rates.request_seconds_average,
            rates.queue_seconds_average,
            rates.compute_input_seconds_average,
            rates.compute_infer_seconds_average,
            rates.compute_output_seconds_average,
            rates.requests_per_second,
        )


@dataclass(frozen=True, slots=True)
class PipelineShape:
    """A watched pipeline's parts: each step (a model that executes) with its calls per
    pipeline request, known exactly for an ensemble and None for a BLS child."""

    model: str
    kind: PipelineKind
    steps: tuple[tuple[str, float | None], ...]

    def calls(self, step: str) -> float | None:
        return next((calls for name, calls in self.steps if name == step), None)

    def has(self, step: str) -> bool:
        return any(name == step for name, _ in self.steps)


def _is_ensemble(state: ModelState | None) -> bool:
    return state is not None and state.config is not None and state.config.traits.ensemble


def _leaves(
    name: str, state: TargetState, factor: float, path: tuple[str, ...], found: dict[str, float]
) -> None:
    """Adds the executing steps of ensemble ``name`` to ``found``, ``factor`` times."""
    model = state.model_state(name)
    if model is None or model.config is None or len(path) > MAX_DEPTH:
        return
    for step, count in ensemble_step_counts(model.config.raw).items():
        if _is_ensemble(state.model_state(step)) and step not in path:
            _leaves(step, state, factor * count, (*path, step), found)
        else:
            found[step] = found.get(step, 0.0) + factor * count


def pipeline_shape(name: str, state: TargetState) -> PipelineShape | None:
    """The parts of watched model ``name``: its ensemble steps (from its config and the
    nested ensembles' configs), else its BLS ``composing_models``; None for a model with
    neither (or whose config is not read yet)."""
    model = state.models.get(name)
    if model is None:
        return None
    if _is_ensemble(model):
        found: dict[str, float] = {}
        _leaves(name, state, 1.0, (name,), found)
        steps: tuple[tuple[str, float | None], ...] = tuple(found.items())
        return PipelineShape(name, "ensemble", steps) if steps else None
    children = tuple((child, None) for child in model.composing_models if child != name)
    return PipelineShape(name, "bls", children) if children else None


def pipeline_shapes(state: TargetState) -> dict[str, PipelineShape]:
    """Every watched pipeline of a target, by name."""
    shapes = {name: pipeline_shape(name, state) for name in state.models}
    return {name: shape for name, shape in shapes.items() if shape is not None}


def calls_per_request(
    parent: str,
    child: str,
    shapes: Mapping[str, PipelineShape],
    readings: Mapping[str, Reading],
    canary_rps: Mapping[str, float],
) -> tuple[float | None, bool]:
    """How many requests on ``child`` one request of ``parent`` makes, and whether that
    is an estimate.

    An ensemble's count is its config's (never an estimate). For a BLS child the rule is:

    * the callers we know of are the watched pipelines and the canary: an ensemble that
      has ``child`` as a step makes ``its requests/s × its count`` of child requests; our
      canary on ``child`` (when it is watched) makes its own rate; other BLS models that
      declare ``child`` make an unknown number each;
    * ``calls = (child requests/s − those known) / Σ requests/s of the BLS parents that
      declare ``child```` — with no other caller, simply the ratio of the two rates;
    * it is an **estimate** whenever another caller was subtracted or shared the child:
      windows never align exactly, and BLS parents sharing a child are taken to call it
      equally often. Traffic from callers nobody watches is invisible and counts as ours.

    None (no estimate) without rates, or when the parent completed no request.
    """
    shape = shapes.get(parent)
    if shape is None:
        return None, False
    exact = shape.calls(child)
    if shape.kind == "ensemble":
        return exact, False
    child_rps = readings.get(child, Reading()).requests_per_second
    known = canary_rps.get(child, 0.0)
    sharing = [parent]
    estimated = child in canary_rps
    for other, other_shape in shapes.items():
        if other == parent or not other_shape.has(child):
            continue
        estimated = True
        calls = other_shape.calls(child)
        if other_shape.kind == "ensemble" and calls is not None:
            known += (readings.get(other, Reading()).requests_per_second or 0.0) * calls
        else:
            sharing.append(other)
    parents_rps = sum(readings.get(p, Reading()).requests_per_second or 0.0 for p in sharing)
    if child_rps is None or parents_rps <= 0:
        return None, estimated
    return max(0.0, child_rps - known) / parents_rps, estimated
