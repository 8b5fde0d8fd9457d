"""The configuration blocks of ensembles, stateful and cached models, both ways.

``add_kind_blocks`` writes ``ensemble_scheduling``, ``sequence_batching`` and
``response_cache`` into a ``ModelConfig`` protobuf as Triton 2.51 prints them;
``kind_fields`` reads them back from a loaded configuration (a repository load with a
config override) into model-set fields; ``normalize_kinds`` adds what Triton's
normalisation adds. What real Triton 2.51 prints (checked in
tests/sim/test_differential_real_triton.py):

* an ensemble has no ``instance_group`` entries, no ``optimization`` block, an empty
  backend and ``default_model_filename``, and ``model_transaction_policy {decoupled:
  false}`` printed although nothing set it;
* ``sequence_batching`` prints ``max_sequence_idle_microseconds`` (1 s unless set), the
  strategy block only when the config names one, and every control with all its fields;
  ``oldest`` with no ``preferred_batch_size`` gets ``[max_batch_size]``;
* ``response_cache {enable: true}`` is printed only where the model enables it.
"""

from __future__ import annotations

from typing import Any

from tritonwatch.sim.model_kinds import DEFAULT_SEQUENCE_IDLE_US, ResolvedStep
from tritonwatch.sim.models import ModelSpec


def add_kind_blocks(config: Any, spec: ModelSpec, steps: tuple[ResolvedStep, ...] | None) -> None:
    """Writes the ensemble, sequence and cache blocks of ``spec`` into ``config``.

    Args:
        config: a ``ModelConfig`` being built.
        spec: the model.
        steps: an ensemble's resolved steps (chained maps filled), or None to print
            the maps the spec states.
    """
    if spec.ensemble_scheduling is not None:
        stated = [
            ResolvedStep(s.model_name, s.model_version, s.input_map, s.output_map)
            for s in spec.ensemble_scheduling.step
        ]
        for step in steps if steps is not None else stated:
            entry = config.ensemble_scheduling.step.add(
                model_name=step.model, model_version=step.version
            )
            entry.input_map.update(step.inputs)
            entry.output_map.update(step.outputs)
    sequences = spec.sequence_batching
    if sequences is not None:
        block = config.sequence_batching
        block.max_sequence_idle_microseconds = sequences.max_sequence_idle_microseconds
        if sequences.direct is not None:
            block.direct.SetInParent()
            block.direct.max_queue_delay_microseconds = (
                sequences.direct.max_queue_delay_microseconds
            )
            block.direct.minimum_slot_utilization = sequences.direct.minimum_slot_utilization
        if sequences.oldest is not None:
            oldest = sequences.oldest
            block.oldest.SetInParent()
            block.oldest.max_candidate_sequences = oldest.max_candidate_sequences
            block.oldest.preferred_batch_size.extend(oldest.preferred_batch_size)
            block.oldest.max_queue_delay_microseconds = oldest.max_queue_delay_microseconds
            block.oldest.preserve_ordering = oldest.preserve_ordering
        for control in sequences.control_input:
            entry = block.control_input.add(name=control.name)
            entry.control.add(
                kind=control.kind,
                int32_false_true=list(control.int32_false_true),
                fp32_false_true=list(control.fp32_false_true),
                bool_false_true=list(control.bool_false_true),
                data_type=control.data_type,
            )
    if spec.response_cache:
        config.response_cache.enable = True


def normalize_kinds(config: Any) -> None:
    """Triton's normalisation of the three blocks (see the module docstring)."""
    if config.platform == "ensemble":
        config.model_transaction_policy.SetInParent()
    if config.HasField("sequence_batching"):
        block = config.sequence_batching
        if block.max_sequence_idle_microseconds == 0:
            block.max_sequence_idle_microseconds = DEFAULT_SEQUENCE_IDLE_US
        if (
            block.HasField("oldest")
            and not block.oldest.preferred_batch_size
            and config.max_batch_size > 0
        ):
            block.oldest.preferred_batch_size.append(config.max_batch_size)


def _enum_name(message: Any, field: str) -> str:
    enum = message.DESCRIPTOR.fields_by_name[field].enum_type
    name: str = enum.values_by_number[getattr(message, field)].name
    return name


def kind_fields(config: Any) -> dict[str, Any]:
    """The model-set fields of a loaded configuration's three blocks."""
    fields: dict[str, Any] = {
        "ensemble_scheduling": None,
        "sequence_batching": None,
        "response_cache": config.HasField("response_cache") and config.response_cache.enable,
    }
    if config.HasField("ensemble_scheduling"):
        fields["ensemble_scheduling"] = {
            "step": [
                {
                    "model_name": step.model_name,
                    "model_version": step.model_version,
                    "input_map": dict(step.input_map),
                    "output_map": dict(step.output_map),
                }
                for step in config.ensemble_scheduling.step
            ]
        }
    if config.HasField("sequence_batching"):
        block = config.sequence_batching
        sequences: dict[str, Any] = {
            "max_sequence_idle_microseconds": block.max_sequence_idle_microseconds
            or DEFAULT_SEQUENCE_IDLE_US,
            "control_input": [
                {
                    "name": entry.name,
                    "kind": _enum_name(control, "kind"),
                    "int32_false_true": list(control.int32_false_true),
                    "fp32_false_true": list(control.fp32_false_true),
                    "bool_false_true": list(control.bool_false_true),
                    "data_type": _enum_name(control, "data_type"),
                }
                for entry in block.control_input
                for control in entry.control
            ],
        }
        if block.HasField("direct"):
            sequences["direct"] = {
                "max_queue_delay_microseconds": block.direct.max_queue_delay_microseconds,
                "minimum_slot_utilization": block.direct.minimum_slot_utilization,
            }
        if block.HasField("oldest"):
            sequences["oldest"] = {
                "max_candidate_sequences": block.oldest.max_candidate_sequences,
                "preferred_batch_size": list(block.oldest.preferred_batch_size),
                "max_queue_delay_microseconds": block.oldest.max_queue_delay_microseconds,
                "preserve_ordering": block.oldest.preserve_ordering,
            }
        fields["sequence_batching"] = sequences
    return fields
