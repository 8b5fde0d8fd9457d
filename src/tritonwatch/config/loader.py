"""Reads a YAML config file into a validated :class:`Config`, or fails with every problem.

``tritonwatch check-config``, ``tritonwatch run`` and SIGHUP reloads all go through
:func:`load_config`, so a file that one accepts the others accept too, and their
error messages are identical.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tritonwatch.config.checks import cross_field_problems
from tritonwatch.config.errors import ConfigError, Problem, problems_from_validation
from tritonwatch.config.schema import Config


class _StrictLoader(yaml.SafeLoader):
    """A safe YAML loader that rejects a key written twice in one mapping, which
    PyYAML otherwise resolves silently in favour of the last one.

    It also turns the bare exceptions PyYAML's scalar constructors raise into
    :class:`yaml.constructor.ConstructorError` with the value's position: they come
    from values the resolver or an explicit tag claims are of a type they are not
    (``2001-02-30`` read as a date, ``!!bool maybe``, an integer of more than 4300
    digits), and would otherwise escape :func:`parse_config` untyped.
    """

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as error:
            raise yaml.constructor.ConstructorError(
                None, None, _unreadable(node, error), node.start_mark
            ) from None


def _unreadable(node: yaml.Node, error: Exception) -> str:
    kind = node.tag.rsplit(":", 1)[-1]
    if not isinstance(node, yaml.ScalarNode):
        shape = "sequence" if isinstance(node, yaml.SequenceNode) else "mapping"
        return f"cannot read this {shape} as {kind}"
    text = str(node.value)
    shown = repr(text if len(text) <= 40 else text[:37] + "...")
    # ValueError texts ("day is out of range for month") help; KeyError's and
    # AttributeError's are about PyYAML's internals.
    reason = f": {error}" if isinstance(error, ValueError) else ""
    return f"cannot read {shown} as {kind}{reason}"


def _construct_unique_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, Hashable):  # `? [a, b]` or a `!!set` as a key
            raise yaml.constructor.ConstructorError(
                "while reading a mapping",
                node.start_mark,
                f"found a {type(key).__name__} as a key",
                key_node.start_mark,
            )
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


def _yaml_problem(error: yaml.YAMLError, text: str) -> Problem:
    if isinstance(error, yaml.reader.ReaderError) and isinstance(error.character, int):
        # A control character; str(error) would add a second line ("in <unicode string>").
        line = text.count("\n", 0, error.position) + 1
        column = error.position - text.rfind("\n", 0, error.position)
        return Problem(
            f"line {line}, column {column}",
            f"invalid YAML: unacceptable character #x{error.character:04x}: {error.reason}",
        )
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
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
        raise ConfigError(source, [_yaml_problem(error, text)]) from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise ConfigError(source, [Problem("", "invalid YAML: nested too deeply")]) from None
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
