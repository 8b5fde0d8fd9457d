"""A model's configuration from ``GET v2/models/{m}/config``, and what changed between two.

Triton prints the loaded configuration as JSON with snake_case protobuf names and every
default filled in (``tests/fixtures/triton_config``). The typed snapshot holds what
tuning changes — ``max_batch_size``, the dynamic batcher, the instance groups — and the
whole document, so that :func:`config_changes` can name *any* field that changed:
a change is an experiment's start (docs/design.md §7), and an unexplained one is worth a log line.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from tritonwatch.records.observations import (
    DynamicBatching,
    InstanceGroup,
    ModelConfigSnapshot,
)


def _integer(value: Any, where: str, default: int = 0) -> int:
    """An integer field; int64 fields may come as strings from protobuf's JSON printer."""
    if value is None:
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    raise ValueError(f"{where} must be an integer, got: {value!r}")


def _integers(value: Any, where: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list, got: {value!r}")
    return tuple(_integer(item, f"{where}[{i}]") for i, item in enumerate(value))


def _dynamic_batching(value: Any) -> DynamicBatching | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"dynamic_batching must be an object, got: {value!r}")
    return DynamicBatching(
        preferred_batch_size=_integers(
            value.get("preferred_batch_size"), "dynamic_batching.preferred_batch_size"
        ),
        max_queue_delay_microseconds=_integer(
            value.get("max_queue_delay_microseconds"),
            "dynamic_batching.max_queue_delay_microseconds",
        ),
    )


def _instance_groups(value: Any) -> tuple[InstanceGroup, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValueError(f"instance_group must be a list, got: {value!r}")
    groups = []
    for index, group in enumerate(value):
        where = f"instance_group[{index}]"
        if not isinstance(group, Mapping):
            raise ValueError(f"{where} must be an object, got: {group!r}")
        groups.append(
            InstanceGroup(
                name=str(group.get("name", "")),
                # Triton's default kind is KIND_AUTO, printed by name; count defaults to 1.
                kind=str(group.get("kind", "KIND_AUTO")),
                count=_integer(group.get("count"), f"{where}.count", default=1),
                gpus=_integers(group.get("gpus"), f"{where}.gpus"),
            )
        )
    return tuple(groups)


def parse_model_config(document: Any, model: str, at: float) -> ModelConfigSnapshot:
    """The typed snapshot of one config response, with the model's traits (ensemble
    steps, Python backend, sequence batching, response cache, decoupled).

    Raises:
        ValueError: the document is not a model configuration (names the field).
    """
    if not isinstance(document, Mapping):
        raise ValueError(f"a model config must be a JSON object, got: {type(document).__name__}")
    return ModelConfigSnapshot(
        model=model,
        at=at,
        max_batch_size=_integer(document.get("max_batch_size"), "max_batch_size"),
        dynamic_batching=_dynamic_batching(document.get("dynamic_batching")),
        instance_groups=_instance_groups(document.get("instance_group")),
        raw=MappingProxyType(dict(document)),
    )


def flatten(value: Any, path: str = "") -> dict[str, Any]:
    """A JSON value as dotted paths → leaves: objects by key, lists of objects by index,
    and lists of scalars whole (as a tuple), since ``preferred_batch_size [4, 8] → [8]``
    reads better as one change than as an index shuffle."""
    if isinstance(value, Mapping):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat |= flatten(item, f"{path}.{key}" if path else str(key))
        return flat or {path: {}}
    if isinstance(value, list) and any(isinstance(item, Mapping | list) for item in value):
        flat = {}
        for index, item in enumerate(value):
            flat |= flatten(item, f"{path}[{index}]")
        return flat
    if isinstance(value, list):
        return {path: tuple(value)}
    return {path: value}


def config_changes(
    previous: ModelConfigSnapshot, current: ModelConfigSnapshot
) -> dict[str, tuple[Any, Any]]:
    """Every field that differs, as dotted path → (old, new); empty when equal.

    A field present on one side only (dynamic batching switched on or off) appears
    with None on the other side.
    """
    if previous.raw == current.raw:
        return {}
    old, new = flatten(previous.raw), flatten(current.raw)
    return {
        path: (old.get(path), new.get(path))
        for path in sorted(old.keys() | new.keys())
        if old.get(path) != new.get(path)
    }
