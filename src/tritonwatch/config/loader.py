"""Reads a YAML config file into a validated :class:`Config`, or fails with every problem.

``tritonwatch check-config``, ``tritonwatch run`` and SIGHUP reloads all go through
:func:`load_config`, so a file that one accepts the others accept too, and their
error messages are identical.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tritonwatch.config.checks import cross_field_problems
from tritonwatch.config.errors import ConfigError, Problem, problems_from_validation
from tritonwatch.config.schema import Config


class _StrictLoader(yaml.SafeLoader):
    """A safe YAML loader that rejects a key written twice in one mapping, which
    PyYAML otherwise resolves silently in favour of the last one."""


def _construct_unique_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in mapping:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping",
                node.start_mark,
                f"found duplicate key {key!r}",
                key_node.start_mark,
            )
        mapping[key] = loader.construct_object(value_node, deep=True)
    return mapping


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_unique_mapping,
)


def _yaml_problem(error: yaml.YAMLError) -> Problem:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return Problem(where, f"invalid YAML: {problem}")


def parse_config(text: str, source: str) -> Config:
    """Validates config ``text``; ``source`` names it in error messages.

    Raises:
        ConfigError: listing every problem found.
    """
    try:
        document = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        raise ConfigError(source, [_yaml_problem(error)]) from None
    if document is None:
        raise ConfigError(source, [Problem("", "the file is empty")])
    if not isinstance(document, dict):
        raise ConfigError(source, [Problem("", "must be a mapping at the top level", document)])
    try:
        config = Config.model_validate(document)
    except ValidationError as error:
        raise ConfigError(source, problems_from_validation(error, Config)) from None
    problems = cross_field_problems(config)
    if problems:
        raise ConfigError(source, problems)
    return config


def load_config(path: str | Path) -> Config:
    """Reads and validates the config file at ``path``.

    Raises:
        ConfigError: the file is unreadable or invalid; the message names the file.
    """
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise ConfigError(source, [Problem("", f"cannot read the file: {reason}")]) from None
    return parse_config(text, source)
