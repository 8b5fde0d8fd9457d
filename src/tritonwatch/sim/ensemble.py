"""An ensemble request: its steps in order, each through its own model, counted as Triton.

Each step is an ordinary request to the step's model (its own batcher, queue, compute,
statistics and ``/metrics`` series rise as for any other caller). The ensemble's own
accounting follows Triton 2.51 (core's ensemble scheduler, checked against the real
server in tests/sim/test_differential_real_triton.py):

* success: one request, one execution of the request's batch size; ``compute_input``,
  ``compute_infer`` and ``compute_output`` are the **sums** of its steps' compute; its
  queue is ~0 — the steps' queue time is in no field of the ensemble, only in its
  request duration;
* failure of a step fails the ensemble with the step's error, prefixed ``in ensemble
  '<name>', ``; the ensemble counts **two** failures with reason ``OTHER`` for it (real
  2.51 reports the failed request once when it answers the error and once when it
  releases the request);
* the ensemble never queues anything itself, so it is never pending;
* the response carries ``parameters`` ``sequence_id``/``sequence_start``/``sequence_end``
  (the request's, 0/false by default), which other models' responses do not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from tritonwatch.sim.errors import SimError
from tritonwatch.sim.model_kinds import ResolvedStep
from tritonwatch.sim.sequences import SequenceFlags
from tritonwatch.sim.stats import RequestTimes
from tritonwatch.sim.tensors import Array

if TYPE_CHECKING:
    from tritonwatch.sim.batcher import ModelRuntime

_NS = 1e9
FAILURES_PER_STEP_ERROR = 2
"""Failures real Triton 2.51 counts on an ensemble for one request a step failed."""

StepRunner = Callable[
    [ResolvedStep, Mapping[str, Array], bool], Awaitable[tuple[dict[str, Array], RequestTimes]]
]
"""Runs one step's request (its inputs, whether a backend failure is drawn for it) and
returns the step's outputs and durations (zero compute for a cache hit)."""


async def run_ensemble(
    runtime: ModelRuntime,
    steps: tuple[ResolvedStep, ...],
    inputs: Mapping[str, Array],
    *,
    batch_size: int,
    arrival: float,
    doomed: bool,
    run_step: StepRunner,
) -> dict[str, Array]:
    """Runs the request through ``steps`` and counts it on the ensemble's ``runtime``.

    Args:
        runtime: the ensemble's own runtime (its ledgers; its batcher stays idle).
        steps: the resolved steps, in order.
        inputs: the request's tensors by the ensemble's input names.
        batch_size: the request's batch size.
        arrival: loop time the request arrived.
        doomed: a backend failure was drawn for this request: its first step fails.
        run_step: executes one step.

    Raises:
        SimError: a step failed (the step's code, the message prefixed as Triton does).
    """
    loop_time = runtime.clock
    tensors: dict[str, Array] = dict(inputs)
    compute = [0, 0, 0]
    try:
        for index, step in enumerate(steps):
            step_inputs = {name: tensors[source] for name, source in step.inputs.items()}
            outputs, times = await run_step(step, step_inputs, doomed and index == 0)
            compute[0] += times.compute_input_ns
            compute[1] += times.compute_infer_ns
            compute[2] += times.compute_output_ns
            for name, target in step.outputs.items():
                tensors[target] = outputs[name]
    except SimError as error:
        for _ in range(FAILURES_PER_STEP_ERROR):
            runtime.record_failure("OTHER", loop_time() - arrival)
        raise SimError(error.code, f"in ensemble '{runtime.spec.name}', {error.message}") from None
    done = loop_time()
    runtime.record_composed(
        done,
        RequestTimes(int((done - arrival) * _NS), 0, compute[0], compute[1], compute[2]),
        batch_size,
    )
    return {tensor.name: tensors[tensor.name] for tensor in runtime.spec.output}


def response_parameters(sequence: SequenceFlags) -> dict[str, int | str | bool]:
    """The ``parameters`` an ensemble's response carries, in Triton's order."""
    return {
        "sequence_id": sequence.id,
        "sequence_start": sequence.start,
        "sequence_end": sequence.end,
    }
