"""The YAML rules every file tritonwatch reads obeys: the config, the exporter's
web-config, fleet discovery files.

PyYAML's safe loader resolves a key written twice silently in favour of the last one and
lets bare Python exceptions escape from odd scalars; :class:`StrictLoader` refuses both
with the position. :func:`read_mapping` is the one way a file's text becomes a mapping,
so every file reports the same faults in the same words (``line 3, column 5: invalid
YAML: …``).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import yaml

from tritonwatch.config.errors import ConfigError, Problem


class StrictLoader(yaml.SafeLoader):
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


def _construct_unique_mapping(loader: StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
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


StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_unique_mapping,
)


def yaml_problem(error: yaml.YAMLError, text: str) -> Problem:
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


def read_yaml(text: str, source: str, error: type[ConfigError] = ConfigError) -> Any:
    """The document in the YAML ``text`` (None when empty); ``source`` names the file.

    Raises:
        ConfigError (or ``error``, a subclass): the text is not YAML or nests too deeply.
    """
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as problem:
        raise error(source, [yaml_problem(problem, text)]) from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise error(source, [Problem("", "invalid YAML: nested too deeply")]) from None


def read_mapping(text: str, source: str, error: type[ConfigError] = ConfigError) -> dict[Any, Any]:
    """The mapping at the top of the YAML ``text``; ``source`` names the file in errors.

    Raises:
        ConfigError (or ``error``, a subclass): as :func:`read_yaml`, and when the text
        is empty or not a mapping at the top level.
    """
    document = read_yaml(text, source, error)
    if document is None:
        raise error(source, [Problem("", "the file is empty")])
    if not isinstance(document, dict):
        raise error(source, [Problem("", "must be a mapping at the top level", document)])
    return document
