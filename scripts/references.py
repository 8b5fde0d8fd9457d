"""The reference pages' tables, read off the code: metrics, configuration, CLI, alerts.

``scripts/generate_docs.py`` writes them into ``docs/reference/*.md`` between markers
and the suite checks they are fresh (``tests/docs``):

* metrics: every family the running daemon's registry holds, after it watched the
  demo's simulator (four models, a streaming LLM, NVML from the H200 recording) — with
  type, labels, unit and help text as the collectors declare them, grouped by collector;
* configuration: every field of ``config.schema.Config``, recursively, with its type,
  default and the docstring written under it;
* CLI: every command and flag of the argument parser, with its environment variable;
* alerts: every alert the generated Prometheus rules carry and the daemon sends itself,
  with severity, what fires it and its runbook section.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import sys
import tempfile
import time
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "src"), str(REPO / "tests")]

from tritonwatch.commands.cli import build_parser  # noqa: E402
from tritonwatch.config.schema import Config  # noqa: E402

_SUFFIX_UNITS = {"_seconds": "seconds", "_bytes": "bytes", "_ratio": "ratio (0–1)",
                 "_celsius": "°C", "_watts": "watts", "_joules": "joules",
                 "_hertz": "hertz", "_per_second": "per second", "_total": "count"}  # fmt: skip
RUNBOOK = "../runbook.md"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


# -- metrics --------------------------------------------------------------------------


def _running_daemon_families() -> list[tuple[str, list[Any]]]:
    """(collector module, its families) of a daemon that watched the demo's simulator."""
    from sim_process import SimProcess  # type: ignore[import-not-found]  # noqa: PLC0415
    from support import fixtures_dir  # type: ignore[import-not-found]  # noqa: PLC0415
    from tritonwatch.commands.demo import (  # noqa: PLC0415
        DEMO_SCENARIOS,
        demo_config,
        demo_model_set,
    )
    from tritonwatch.common.logs import configure_logging  # noqa: PLC0415
    from tritonwatch.config import load_config  # noqa: PLC0415
    from tritonwatch.runtime.daemon import Daemon  # noqa: PLC0415
    from tritonwatch.scrape.nvml_fake import FakeNvml  # noqa: PLC0415

    configure_logging("json", "error")
    fake = FakeNvml.from_file(fixtures_dir() / "nvml" / "h200_probe.json", gpus=2)
    with SimProcess(demo_model_set(), seed=0) as sim, tempfile.TemporaryDirectory() as folder:
        for model, scenario in DEMO_SCENARIOS.items():
            sim.set_scenario(scenario, model)
        path = demo_config(sim, Path(folder), "127.0.0.1:0")
        text = path.read_text().replace("interval: 5s, timeout: 2s", "interval: 1s, timeout: 800ms")
        # every family: below full the collectors skip the full-only ones
        text = text.replace("exporter: {listen:", "exporter: {detail: full, listen:")
        path.write_text(text + "nvml: {enabled: true}\n")
        daemon = Daemon(path, load_config(path), listen_override="127.0.0.1:0", nvml=fake)
        daemon.start()
        try:
            time.sleep(3)
            registry = daemon.registry
            collectors = list(registry._collector_to_names)
            return [(type(c).__module__, list(c.collect())) for c in collectors]
        finally:
            daemon.stop()


def _exposed_name(family: Any) -> str:
    suffix = {"counter": "_total", "info": "_info"}.get(family.type, "")
    return f"{family.name}{suffix}"


def _labels(family: Any) -> list[str]:
    declared = getattr(family, "_labelnames", None)
    if declared:
        return list(declared)
    seen: dict[str, None] = {}
    for sample in family.samples:
        seen.update(dict.fromkeys(sample.labels))
    return [name for name in seen if name not in {"le", "quantile"}]


def _unit(family: Any) -> str:
    if family.unit:
        return str(family.unit)
    for suffix, unit in _SUFFIX_UNITS.items():
        if _exposed_name(family).endswith(suffix):
            return unit
    return "—"


def metric_tables() -> str:
    from tritonwatch.export.detail import family_detail  # noqa: PLC0415

    out = []
    for module, collected in _running_daemon_families():
        families = [f for f in collected if f.name.startswith("tritonwatch_")]
        if not families:
            continue
        doc = inspect.getdoc(sys.modules[module]) or module
        out.append(f"### {doc.splitlines()[0].rstrip('.')}\n")
        out.append(f"`{module.removeprefix('tritonwatch.')}`\n")
        out.append("| metric | type | labels | unit | level | meaning |")
        out.append("|---|---|---|---|---|---|")
        for family in sorted(families, key=lambda f: f.name):
            labels = ", ".join(f"`{name}`" for name in _labels(family)) or "—"
            name = _exposed_name(family)
            cells = [f"`{name}`", family.type, labels, _unit(family), family_detail(name)]
            out.append("| " + " | ".join([*cells, _cell(family.documentation)]) + " |")
        out.append("")
    return "\n".join(out)


# -- configuration --------------------------------------------------------------------


def _attribute_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """Each field's docstring (the string right under it in the class body)."""
    docs: dict[str, str] = {}
    for klass in reversed(model.__mro__):
        if not (isinstance(klass, type) and issubclass(klass, BaseModel)) or klass is BaseModel:
            continue
        try:
            tree = ast.parse(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, following in zip(body, [*body[1:], None], strict=True):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[node.target.id] = inspect.cleandoc(following.value.value)
    return docs


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for argument in typing.get_args(annotation):
        yield from _models_in(argument)


def _type_name(annotation: Any) -> str:  # noqa: PLR0911 - one answer per kind of type
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(value) for value in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin in (tuple, list):
        return "list"
    if origin is dict:
        return "mapping"
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation)).replace("Path", "path")


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default
    if isinstance(value, BaseModel):
        return "(see below)"
    if value is None:
        return "—"
    if isinstance(value, tuple):
        value = list(value)
    try:
        text = yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
    except yaml.YAMLError:
        text = str(value)
    return f"`{text}`"


def _first_sentence(text: str) -> str:
    paragraph = " ".join(text.split("\n\n", maxsplit=1)[0].split())
    head, dot, _ = paragraph.partition(". ")
    return head + "." if dot else paragraph


def config_tables() -> str:
    """One table per section (a schema class), with every place it is written."""
    order: list[type[BaseModel]] = []
    places: dict[type[BaseModel], list[str]] = {}

    def walk(model: type[BaseModel], path: str) -> None:
        if model in places:
            places[model].append(path)
            return
        places[model] = [path]
        order.append(model)
        for name, field in model.model_fields.items():
            key = field.alias or name
            full = f"{path}.{key}" if path else key
            origin = typing.get_origin(field.annotation)
            for sub in _models_in(field.annotation):
                walk(
                    sub,
                    full + ("[]" if origin in (tuple, list) else ".NAME" if origin is dict else ""),
                )

    walk(Config, "")
    out: list[str] = []
    for model in order:
        docs = _attribute_docstrings(model)
        where = ", ".join(f"`{place}`" for place in places[model] if place)
        out.append(f"### {model.__name__}\n")
        if model is not Config:
            out.append(f"{_cell(inspect.getdoc(model) or '')}\n")
            out.append(f"Written at: {where}.\n")
        out.append("| field | type | default | meaning |\n|---|---|---|---|")
        for name, field in model.model_fields.items():
            meaning = docs.get(name, "")
            sections = list(_models_in(field.annotation))
            if not meaning and sections:
                meaning = (
                    f"See {', '.join(f'[{s.__name__}](#{s.__name__.lower()})' for s in sections)}: "
                )
                meaning += _first_sentence(inspect.getdoc(sections[0]) or "")
            out.append(f"| `{field.alias or name}` | {_type_name(field.annotation)} | "
                       f"{_default(field)} | {_cell(meaning)} |")  # fmt: skip
        out.append("")
    return "\n".join(out)


# -- CLI ------------------------------------------------------------------------------


def _flag_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        names = ", ".join(f"`{option}`" for option in action.option_strings) or f"`{action.dest}`"
        help_text, _, env = (action.help or "").partition(" [env: ")
        env = f"`{env.rstrip(']')}`" if env else "—"
        default = action.default
        shown = "—" if default in (None, False, [], argparse.SUPPRESS) else f"`{default}`"
        choices = f" (one of {', '.join(map(str, action.choices))})" if action.choices else ""
        rows.append(f"| {names} | {env} | {shown} | {_cell(help_text)}{_cell(choices)} |")
    return rows


def cli_tables() -> str:
    parser = build_parser(environ={}, tools=True)
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    out = ["### `tritonwatch`\n", "| flag | environment | default | meaning |", "|---|---|---|---|"]
    out += [*_flag_rows(parser), ""]
    for name, sub in commands.choices.items():
        out.append(f"### `tritonwatch {name}`\n")
        out.append(f"{_cell(helps.get(name) or '')}\n")
        out += ["| flag | environment | default | meaning |", "|---|---|---|---|"]
        out += [*_flag_rows(sub), ""]
    return "\n".join(out)


# -- alerts ---------------------------------------------------------------------------


def _rule_alerts() -> list[dict[str, Any]]:
    from tritonwatch.commands.rules.generate import render_config_rules  # noqa: PLC0415
    from tritonwatch.config import load_config  # noqa: PLC0415

    config = load_config(REPO / "deploy" / "compose" / "tritonwatch.yaml")
    groups = yaml.safe_load(render_config_rules(config))["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def alert_tables() -> str:
    from tritonwatch.export import alerts  # noqa: PLC0415

    daemon_sent = {
        alerts.SLO_BURN, alerts.SERVER_DOWN, alerts.MODEL_NOT_SERVING,
        alerts.CANARY_STALLED, alerts.GPU_UNDERUSED, alerts.TUNING_RECOMMENDATION,
    }  # fmt: skip
    rows: dict[str, dict[str, Any]] = {}
    for rule in _rule_alerts():
        entry = rows.setdefault(rule["alert"], {"severities": set(), "rule": rule})
        entry["severities"].add(rule["labels"].get("severity", ""))
    out = ["| alert | sent by | severity | summary | runbook |", "|---|---|---|---|---|"]
    for name in sorted(rows.keys() | daemon_sent):
        found = rows.get(name)
        sent = (("Prometheus rules", found is not None), ("the daemon", name in daemon_sent))
        senders = " and ".join(sender for sender, yes in sent if yes)
        if found is not None:
            rule = found["rule"]
            severity = ", ".join(sorted(found["severities"]))
            summary = rule["annotations"].get("summary", "")
            anchor = rule["annotations"]["runbook_url"].partition("#")[2]
        else:
            severity = "from the recommendation (`info`, `warning`)"
            summary = "{{ model }} on {{ target }}: the recommended action"
            anchor = "add_instance" if name == alerts.GPU_UNDERUSED else "lower_queue_delay"
        runbook = f"[{anchor}]({RUNBOOK}#{anchor})"
        out.append(f"| `{name}` | {senders} | {severity} | {_cell(summary)} | {runbook} |")
    return "\n".join(out) + "\n"
