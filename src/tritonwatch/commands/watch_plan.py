"""What would be watched, in words: ``check-config`` and ``run --dry-run`` print it.

``check-config`` reads no server: a target that discovers its models says so ("models
discovered at run time"). ``run --dry-run`` asks each target's repository index and
each model's metadata and config once, and shows the models found with the canary's
inputs (names, datatypes, shapes) as the canary would send them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tritonwatch.config.schema import Config, TargetConfig, WatchedModel
from tritonwatch.config.slo_schema import LatencySLO
from tritonwatch.config.units import format_duration
from tritonwatch.kserve.payload import PayloadError, input_specs
from tritonwatch.runtime.model_discovery import (
    DiscoveryError,
    ModelDiscovery,
    client_for,
    read_model,
    with_discovered_models,
)

InputLines = Callable[[TargetConfig, WatchedModel], list[str]]


def _percent(objective: float) -> str:
    return f"{objective * 100:g}%"


def _under(latency: LatencySLO) -> str:
    """``95% under 50ms``: a threshold SLO in words."""
    return f"{_percent(latency.objective)} under {format_duration(latency.threshold)}"


def _selection_line(target: TargetConfig) -> str | None:
    selection = target.selection
    if selection is None:
        return None
    filters = [
        f"{k} {v!r}"
        for k, v in (("include", selection.include), ("exclude", selection.exclude))
        if v
    ]
    return "every READY model" + (f" ({', '.join(filters)})" if filters else "")


def model_lines(config: Config, target: TargetConfig, model: WatchedModel) -> list[str]:
    """One model: protocol, canary rate and the SLOs that judge it as far as the file
    tells (a model that surely streams: TTFT and ITL, latency only where written)."""
    canary = config.canary_for(target, model)
    slo = config.slo_for(model)
    judged = slo.judged(canary.streams_surely)
    version = f" (version {model.version})" if model.version else ""
    state = f"{canary.protocol}, {canary.rate:g}/s" if canary.enabled else "off"
    latency = "" if judged.latency is None else f"latency: {_under(judged.latency)}; "
    lines = [
        f"  model {model.name}{version}: canary {state}",
        f"    SLO {latency}availability: "
        f"{_percent(slo.availability.objective)}; period {format_duration(slo.period)}",
    ]
    streaming = [
        f"{name}: {_under(stream_slo)}"
        for name, stream_slo in (("TTFT", judged.ttft), ("ITL", judged.itl))
        if stream_slo is not None
    ]
    if streaming:
        lines.append(f"    SLO {'; '.join(streaming)}")
    return lines


def describe(
    config: Config,
    *,
    selections: Mapping[str, TargetConfig] | None = None,
    inputs: InputLines | None = None,
) -> list[str]:
    """The plan for ``config`` (its targets' models resolved or not).

    Args:
        selections: the targets as configured, by name, when ``config`` holds models
            already discovered; says how each one's models were chosen.
        inputs: the canary input lines of one model (dry-run); None reads no server.
    """
    lines = []
    for target in config.targets:
        configured = (selections or {}).get(target.name, target)
        lines.append(
            f"target {target.name}: {target.url} ({target.protocol}), "
            f"metrics {target.effective_metrics_url}"
        )
        chosen = _selection_line(configured)
        if chosen is not None:
            found = "discovered at run time" if selections is None else "found"
            lines.append(f"  models: {chosen}, {found}")
        if not target.models and selections is not None:
            lines.append("  (no model found)")
        for model in target.models:
            lines += model_lines(config, target, model)
            if inputs is not None:
                lines += inputs(target, model)
    return lines


def canary_input_lines(config: Config, timeout: float) -> InputLines:
    """Reads a model's metadata and config and shows the inputs the canary derives
    (a shape from ``canary.inputs`` replaces the one derived)."""

    def lines(target: TargetConfig, model: WatchedModel) -> list[str]:
        client = client_for(target, timeout)
        try:
            metadata, model_config = read_model(client, model.name)
        except DiscoveryError as error:
            return [f"    inputs: cannot read the model's metadata: {error}"]
        finally:
            client.close()
        shapes = {
            name: override.shape
            for name, override in config.canary_for(target, model).inputs.items()
            if override.shape is not None
        }
        return _input_lines(model.name, metadata, model_config, shapes)

    return lines


def _input_lines(
    name: str,
    metadata: Mapping[str, Any],
    model_config: Mapping[str, Any] | None,
    shapes: Mapping[str, tuple[int, ...]],
) -> list[str]:
    try:
        specs = input_specs(name, metadata, model_config)
    except PayloadError as error:
        return [f"    inputs: the canary cannot fill this model: {error}"]
    lines = []
    for spec in specs:
        shape = shapes.get(spec.name, spec.shape)
        lines.append(f"    input {spec.name}: {spec.datatype} [{', '.join(map(str, shape))}]")
    return lines


def dry_run(config: Config, timeout: float) -> list[str]:
    """Discovers once and describes the result, with each model's canary inputs."""
    discovery = ModelDiscovery(timeout=timeout)
    discovery.refresh(config)
    resolved = with_discovered_models(config, discovery.found)
    selections = {target.name: target for target in config.targets}
    return describe(resolved, selections=selections, inputs=canary_input_lines(config, timeout))
