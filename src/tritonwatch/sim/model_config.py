"""Triton's model configuration: build it, print it, and apply a client's override.

The configuration is held as the real ``inference.ModelConfig`` protobuf from
``tritonclient.grpc.model_config_pb2``, so the gRPC ``ModelConfig`` answer is the object
itself and the HTTP ``/config`` JSON follows Triton's printing rules: protobuf field
names (snake_case) in declaration order, every scalar and repeated field printed even at
its default, unset sub-messages left out, enums as their names (``TYPE_FP32``,
``KIND_GPU``) and 64-bit integers as JSON numbers (Triton converts them back from the
strings protobuf's JSON printer makes).
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import (
    Descriptor,
    FieldDescriptor,
)
from pydantic import ValidationError
from tritonclient.grpc import model_config_pb2

from tritonwatch.common.grpc_json import INT64_TYPES
from tritonwatch.sim.errors import ErrorCode, SimError
from tritonwatch.sim.kind_config import add_kind_blocks, kind_fields, normalize_kinds
from tritonwatch.sim.model_kinds import ResolvedStep
from tritonwatch.sim.models import ModelSpec
from tritonwatch.sim.tensors import wire_type

ModelConfig = model_config_pb2.ModelConfig


def build_config(spec: ModelSpec, steps: tuple[ResolvedStep, ...] | None = None) -> Any:
    """The configuration Triton would report for ``spec`` after auto-completion (an
    ensemble's ``steps`` resolved, when given: ``kind_config.add_kind_blocks``)."""
    config = ModelConfig(
        name=spec.name,
        platform=spec.platform,
        backend=spec.backend,
        max_batch_size=spec.max_batch_size,
    )
    config.version_policy.latest.num_versions = 1
    for tensor in spec.input:
        config.input.add(name=tensor.name, data_type=tensor.data_type, dims=list(tensor.dims))
    for tensor in spec.output:
        config.output.add(name=tensor.name, data_type=tensor.data_type, dims=list(tensor.dims))
    if spec.dynamic_batching is not None:
        batching = config.dynamic_batching
        batching.preferred_batch_size.extend(spec.dynamic_batching.preferred_batch_size)
        batching.max_queue_delay_microseconds = spec.dynamic_batching.max_queue_delay_microseconds
    group = spec.instance_group
    if not spec.is_ensemble:  # an ensemble has no instances of its own
        config.instance_group.add(
            name=group.name or f"{spec.name}_0",
            kind=group.kind,
            count=group.count,
            gpus=list(group.gpus) if group.kind == "KIND_GPU" else [],
        )
    add_kind_blocks(config, spec, steps)
    for key, value in spec.parameters.items():
        config.parameters[key].string_value = value
    if spec.decoupled:  # printed only when set, as real Triton 2.51 prints it
        config.model_transaction_policy.decoupled = True
    return normalize(config)


DEFAULT_MODEL_FILENAMES = {"python": "model.py", "onnxruntime": "model.onnx"}
"""What a backend's auto-complete puts in ``default_model_filename`` (real Triton 2.51 for
the Python backend; a published ONNX Runtime config, tests/fixtures/triton_config)."""


def normalize(config: Any) -> Any:
    """Fills the defaults Triton's auto-complete and normalisation add, as a loaded config
    shows them: the version policy, pinned memory, ``preferred_batch_size`` =
    ``[max_batch_size]`` when dynamic batching names none, the backend's default model
    file, and instance-group names (``<model>_<index>``)."""
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    if config.platform != "ensemble":  # an ensemble prints no optimization block
        optimization = config.optimization
        if not optimization.HasField("input_pinned_memory"):
            optimization.input_pinned_memory.enable = True
        if not optimization.HasField("output_pinned_memory"):
            optimization.output_pinned_memory.enable = True
    normalize_kinds(config)
    if (
        config.HasField("dynamic_batching")
        and not config.dynamic_batching.preferred_batch_size
        and config.max_batch_size > 0
    ):
        config.dynamic_batching.preferred_batch_size.append(config.max_batch_size)
    if not config.default_model_filename:
        config.default_model_filename = DEFAULT_MODEL_FILENAMES.get(config.backend, "")
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
    return config


def config_to_json(config: Any) -> dict[str, Any]:
    """Prints a configuration as Triton's ``GET v2/models/{m}/config`` does."""
    data = json_format.MessageToDict(
        config,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    if "ensemble_scheduling" in data:  # newer than 2.51's protobuf: it prints no such field
        data["ensemble_scheduling"].pop("max_inflight_requests", None)
    return _in_declaration_order(config.DESCRIPTOR, data)


def _in_declaration_order(descriptor: Descriptor, data: dict[str, Any]) -> dict[str, Any]:
    ordered: dict[str, Any] = {}
    for field in descriptor.fields:
        if field.name in data:
            ordered[field.name] = _convert(field, data[field.name])
    return ordered


def _convert(field: FieldDescriptor, value: Any) -> Any:
    message = field.message_type
    if message is not None and message.GetOptions().map_entry:
        value_field = message.fields_by_name["value"]
        return {key: _convert_single(value_field, item) for key, item in value.items()}
    if field.is_repeated:
        return [_convert_single(field, item) for item in value]
    return _convert_single(field, value)


def _convert_single(field: FieldDescriptor, value: Any) -> Any:
    if field.message_type is not None:
        return _in_declaration_order(field.message_type, value)
    if field.type in INT64_TYPES:
        return int(value)
    return value


def load_failed(name: str, reason: str) -> SimError:
    """Triton's answer to a load it refuses while polling the repository: INTERNAL with a
    fixed message; the cause goes to the server log only (``detail``)."""
    return SimError(
        ErrorCode.INTERNAL,
        f"failed to load '{name}', failed to poll from model repository",
        detail=reason,
    )


def parse_override(name: str, text: str) -> Any:
    """Parses the ``config`` parameter of a load request (the whole config as JSON).

    Raises:
        SimError: INTERNAL (Triton's "failed to poll" answer) when the JSON is not a
            ModelConfig or names another model.
    """
    config = ModelConfig()
    try:
        json_format.Parse(text, config)
    except json_format.ParseError as error:
        raise load_failed(name, f"Invalid config override: {error}") from None
    if not config.name:
        config.name = name
    if config.name != name:
        raise load_failed(
            name,
            f"unexpected directory name '{name}' for model '{config.name}', "
            "directory name must equal model name",
        )
    return normalize(config)


def add_implicit_instance_group(config: Any, base: ModelSpec) -> None:
    """Gives a config without ``instance_group`` the one Triton adds: one instance named
    after the model, of the kind (and on the GPUs) the model's own set gives it."""
    if config.instance_group or config.platform == "ensemble":
        return
    group = base.instance_group
    config.instance_group.add(
        name=config.name,
        kind=group.kind,
        count=1,
        gpus=list(group.gpus) if group.kind == "KIND_GPU" else [],
    )


def spec_from_config(base: ModelSpec, config: Any) -> ModelSpec:
    """The simulated model a configuration describes, keeping ``base``'s cost model.

    Raises:
        SimError: INTERNAL (Triton's "failed to poll" answer) when the configuration is
            invalid or one the simulator cannot run; ``detail`` says why.
    """
    if len(config.instance_group) > 1:
        raise load_failed(base.name, "the simulator runs one instance_group per model")
    update: dict[str, Any] = base.model_dump()
    update.update(kind_fields(config))
    update["max_batch_size"] = config.max_batch_size
    update["platform"] = config.platform
    update["backend"] = config.backend
    update["dynamic_batching"] = (
        {
            "preferred_batch_size": list(config.dynamic_batching.preferred_batch_size),
            "max_queue_delay_microseconds": config.dynamic_batching.max_queue_delay_microseconds,
        }
        if config.HasField("dynamic_batching")
        else None
    )
    if config.instance_group:
        group = config.instance_group[0]
        kind = model_config_pb2.ModelInstanceGroup.Kind.Name(group.kind)
        update["instance_group"] = {
            # the default name stays implicit, so a printed config loads back unchanged
            "name": None if group.name in ("", f"{config.name}_0") else group.name,
            "count": group.count or 1,
            "kind": "KIND_CPU" if kind == "KIND_CPU" else "KIND_GPU",
            "gpus": list(group.gpus) or list(base.instance_group.gpus),
        }
    update["input"] = [_tensor(tensor) for tensor in config.input]
    update["output"] = [_tensor(tensor) for tensor in config.output]
    update["parameters"] = {key: value.string_value for key, value in config.parameters.items()}
    try:
        return ModelSpec.model_validate(update)
    except ValidationError as error:
        details = "; ".join(
            f"{'.'.join(str(p) for p in item['loc'])}: {item['msg']}" for item in error.errors()
        )
        raise load_failed(base.name, f"invalid model configuration: {details}") from None


def _tensor(tensor: Any) -> dict[str, Any]:
    return {
        "name": tensor.name,
        "data_type": model_config_pb2.DataType.Name(tensor.data_type),
        "dims": list(tensor.dims),
    }


def only_instance_count_differs(old: Any, new: Any) -> bool:
    """True when ``new`` changes nothing but instance counts (Triton applies it in place)."""
    if len(old.instance_group) != len(new.instance_group):
        return False
    probe = ModelConfig()
    probe.CopyFrom(new)
    for probe_group, old_group in zip(probe.instance_group, old.instance_group, strict=True):
        probe_group.count = old_group.count
    return bool(probe == old)


def model_metadata(spec: ModelSpec) -> dict[str, Any]:
    """``GET v2/models/{m}``: name, versions, platform, and tensors with the batch dim."""
    batch = [-1] if spec.max_batch_size > 0 else []

    def describe(tensors: Any) -> list[dict[str, Any]]:
        return [
            {"name": t.name, "datatype": wire_type(t.data_type), "shape": [*batch, *t.dims]}
            for t in tensors
        ]

    return {
        "name": spec.name,
        "versions": [spec.version_label],
        "platform": spec.platform or spec.backend,
        "inputs": describe(spec.input),
        "outputs": describe(spec.output),
    }
