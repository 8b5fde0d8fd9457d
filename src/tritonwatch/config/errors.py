"""Config problems phrased for people: file, field path, message, offending value."""

from __future__ import annotations

import difflib
import json
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from tritonwatch.config.schema import UNION_TAGS

Loc = tuple[int | str, ...]
_MISSING = object()
_MAX_VALUE_CHARS = 80


@dataclass(frozen=True)
class Problem:
    """One mistake in a config file."""

    path: str
    message: str
    value: object = _MISSING

    def render(self, source: str) -> str:
        where = f"{source}: {self.path}" if self.path else source
        if self.value is _MISSING:
            return f"{where}: {self.message}"
        return f"{where}: {self.message}, got: {format_value(self.value)}"


class ConfigError(Exception):
    """A config file that cannot be used; ``str()`` is one line per problem."""

    def __init__(self, source: str, problems: Sequence[Problem]) -> None:
        self.source = source
        self.problems = tuple(problems)
        super().__init__("\n".join(problem.render(source) for problem in self.problems))


def format_value(value: object) -> str:
    """Shows a value as the user wrote it in YAML (JSON notation), shortened if long.

    Written piece by piece and stopped once long enough, because the value is whatever
    the file held: a structure that YAML aliases expand to millions of items, or an
    integer written in hex that ``str()`` refuses (over 4300 digits), must still give
    a message, and quickly.
    """
    if isinstance(value, str):
        text = repr(value)
    else:
        text = ""
        for piece in _json_pieces(value):
            text += piece
            if len(text) > _MAX_VALUE_CHARS:
                break
    if len(text) > _MAX_VALUE_CHARS:
        text = text[: _MAX_VALUE_CHARS - 3] + "..."
    return text


def _json_pieces(value: object) -> Iterator[str]:
    """``json.dumps(value, default=str)``, lazily, for the types YAML produces."""
    if value is None or isinstance(value, bool | float):
        yield json.dumps(value)
    elif isinstance(value, int):
        yield _int_text(value)
    elif isinstance(value, str):
        yield json.dumps(value)
    elif isinstance(value, dict):
        yield "{"
        for index, (key, item) in enumerate(value.items()):
            yield ", " if index else ""
            yield json.dumps(key if isinstance(key, str) else "".join(_json_pieces(key)))
            yield ": "
            yield from _json_pieces(item)
        yield "}"
    elif isinstance(value, list | tuple):
        yield "["
        for index, item in enumerate(value):
            yield ", " if index else ""
            yield from _json_pieces(item)
        yield "]"
    else:  # dates, bytes, sets: shown as their str(), like json.dumps(default=str)
        try:
            yield json.dumps(str(value))
        except ValueError:  # a set holding an integer str() refuses
            yield json.dumps(f"<{type(value).__name__}>")


def _int_text(value: int) -> str:
    try:
        return str(value)
    except ValueError:  # beyond Python's 4300-digit limit; only hex from YAML gets here
        return f"{value:#x}"


def field_path(loc: Loc) -> str:
    """``('targets', 0, 'models', 1, 'name')`` → ``targets[0].models[1].name``."""
    path = ""
    for part in loc:
        if part in UNION_TAGS:  # which shape of ``models:`` pydantic tried: not the user's
            continue
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            # A key with a line break or control character in it is quoted, so that a
            # message stays one line per problem.
            text = part if part.isprintable() else repr(part)
            path += f".{text}" if path else text
    return path


def problems_from_validation(error: ValidationError, schema: type[BaseModel]) -> list[Problem]:
    """Turns pydantic's errors into :class:`Problem` s, one per field path."""
    details = error.errors(include_url=False)
    locations = [detail["loc"] for detail in details]
    problems: list[Problem] = []
    seen: set[str] = set()
    for detail in details:
        path = field_path(detail["loc"])
        # A list with one bad entry is also reported as "too short" at the list
        # itself; the deeper error is the one that helps, so only it is kept.
        if path in seen or _has_deeper_error(detail["loc"], locations):
            continue
        seen.add(path)
        problems.append(_problem(detail, path, schema))
    return problems


def _has_deeper_error(loc: Loc, locations: Sequence[Loc]) -> bool:
    return any(len(other) > len(loc) and other[: len(loc)] == loc for other in locations)


def _problem(detail: ErrorDetails, path: str, schema: type[BaseModel]) -> Problem:
    kind = detail["type"]
    if kind == "missing":
        return Problem(path, "required field is missing")
    if kind == "extra_forbidden":
        return Problem(path, "unknown key" + _suggestion(detail["loc"], schema))
    if kind == "too_short":
        minimum = (detail.get("ctx") or {}).get("min_length", 1)
        return Problem(path, f"must list at least {minimum} entry", detail["input"])
    message = detail["msg"].replace("valid tuple", "valid list")
    message = message.replace("valid dictionary", "mapping")
    return Problem(path, message[0].lower() + message[1:], detail["input"])


def _suggestion(loc: Loc, schema: type[BaseModel]) -> str:
    allowed = _allowed_keys(loc, schema)
    if not allowed:
        return ""
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return " (allowed: " + ", ".join(allowed) + ")"


def _allowed_keys(loc: Loc, schema: type[BaseModel]) -> list[str]:
    """Walks the schema along ``loc`` to list the keys valid next to the unknown one."""
    model: type[BaseModel] | None = schema
    expecting_dict_key = False
    parts = [part for part in loc if part not in UNION_TAGS]
    for index, part in enumerate(parts[:-1]):
        if isinstance(part, int):
            continue
        if expecting_dict_key:
            expecting_dict_key = False
            continue
        field = _field_named(model, part) if model else None
        if field is None:
            return []
        in_list = isinstance(parts[index + 1], int)
        model, expecting_dict_key = _model_inside(field.annotation, in_list)
    return [_key_of(name, field) for name, field in model.model_fields.items()] if model else []


def _key_of(name: str, field: FieldInfo) -> str:
    """The key a field is written under in the file (its alias, if it has one)."""
    return field.alias or name


def _field_named(model: type[BaseModel], key: str) -> FieldInfo | None:
    for name, field in model.model_fields.items():
        if _key_of(name, field) == key:
            return field
    return None


def _model_inside(annotation: Any, in_list: bool = False) -> tuple[type[BaseModel] | None, bool]:
    """Finds the config section type in ``X | None``, ``tuple[X, ...]``, ``dict[str, X]``;
    of ``tuple[X, ...] | Y`` (the two shapes of ``models:``), X when ``in_list``, else Y."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    origin = get_origin(annotation)
    if origin is Annotated:
        return _model_inside(get_args(annotation)[0], in_list)
    arguments = [a for a in get_args(annotation) if a is not type(None) and a is not Ellipsis]
    if origin is dict and len(arguments) == 2:
        inner, _ = _model_inside(arguments[1])
        return inner, True
    if origin in (Union, types.UnionType):
        shapes = [_unannotated(a) for a in arguments]
        if any(get_origin(a) in (tuple, list) for a in shapes) and len(shapes) > 1:
            arguments = [
                a
                for a, shape in zip(arguments, shapes, strict=True)
                if (get_origin(shape) in (tuple, list)) == in_list
            ]
    if origin in (tuple, list, Union, types.UnionType):
        for argument in arguments:
            inner, is_dict = _model_inside(argument, in_list)
            if inner is not None:
                return inner, is_dict
    return None, False


def _unannotated(annotation: Any) -> Any:
    return get_args(annotation)[0] if get_origin(annotation) is Annotated else annotation
