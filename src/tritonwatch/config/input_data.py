"""perf_analyzer's ``--input-data`` JSON file, read for ``canary.input_data``.

The format (perf_analyzer's docs/input_data.md, "Real Input Data")::

    {"data": [
        {"INPUT0": [1, 2, 3, 4]},                                  # the elements, flat
        {"INPUT0": {"content": [1, 2, 3, 4], "shape": [2, 2]}},    # with a shape
        {"INPUT0": {"b64": "AQAAAAIAAAA="}},                       # raw bytes
        {"INPUT0": {"content": {"b64": "..."}, "shape": [2]}}      # raw bytes, a shape
    ]}

One object per request, rotated in order; ``data`` may instead hold lists of such
objects (perf_analyzer's streams, one per sequence), which are read one after the other.
Elements are written in row-major order: numbers, ``true``/``false`` or strings (a
nested list is read flat, as numpy reads it); ``b64`` is the tensor's bytes,
little-endian, a BYTES tensor's elements each with its 4-byte length. A ``shape`` is
the input's shape *without* the batch dimension, as perf_analyzer's ``--shape``.
``validation_data`` is allowed and not read. Any other key is a mistake.

This module reads the file and checks what can be checked without the model: the
structure, each value's kind, each ``b64`` decodes. :class:`InputDataError` names the
file, the sample (0-based, as it counts in ``data`` once streams are read flat), the
input and the value. The config check (``tritonwatch check-config``, the loader)
reports it; what only the model can say (an input it lacks, a value its datatype cannot
hold, a count that does not fit its shape) is the canary's, when it prepares
(:mod:`tritonwatch.kserve.input_data`).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonwatch.config.errors import format_value

Element = bool | int | float | str
"""One element as JSON writes it."""
TOP_LEVEL_KEYS = frozenset({"data", "validation_data"})
_TENSOR_KEYS = frozenset({"content", "shape", "b64"})


class InputDataError(ValueError):
    """An input-data file that cannot be used: which file, sample, input and value."""

    def __init__(
        self,
        path: Path,
        reason: str,
        *,
        sample: int | None = None,
        input_name: str | None = None,
        value: object = None,
        has_value: bool = False,
    ) -> None:
        where = [str(path)]
        if sample is not None:
            where.append(f"sample {sample}")
        if input_name is not None:
            where.append(f"input {input_name!r}")
        text = f"{', '.join(where)}: {reason}"
        if has_value:
            text += f", got: {format_value(value)}"
        super().__init__(text)
        self.path = path
        self.sample = sample
        self.input_name = input_name


@dataclass(frozen=True, slots=True)
class SampleInput:
    """One input of one sample: its elements (``values``) or its bytes (``raw``), and
    the shape the file gives it (without the batch dimension), if any."""

    values: tuple[Element, ...] | None = None
    raw: bytes | None = None
    shape: tuple[int, ...] | None = None


Sample = Mapping[str, SampleInput]
"""One request's inputs by name."""


def read_input_data(path: Path) -> tuple[Sample, ...]:
    """Every sample of the input-data file at ``path``, in the order they are sent.

    Raises:
        InputDataError: the file cannot be read, is no JSON, or is not in
            perf_analyzer's format; the message names where and what.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise InputDataError(path, f"cannot read the file: {reason}") from None
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise InputDataError(path, f"is no JSON: {error}") from None
    if not isinstance(document, dict) or "data" not in document:
        raise InputDataError(
            path, 'must be a JSON object with a "data" list', value=document, has_value=True
        )
    unknown = sorted(set(document) - TOP_LEVEL_KEYS)
    if unknown:
        reason = 'has a key perf_analyzer does not read (allowed: "data", "validation_data")'
        raise InputDataError(path, reason, value=unknown[0], has_value=True)
    entries = list(_entries(path, document["data"]))
    if not entries:
        raise InputDataError(path, '"data" holds no sample')
    return tuple(_sample(path, index, entry) for index, entry in enumerate(entries))


def _entries(path: Path, data: object) -> Iterator[object]:
    """The sample objects of ``data``, streams (lists of samples) read one after another."""
    if not isinstance(data, list):
        raise InputDataError(path, '"data" must be a list', value=data, has_value=True)
    for entry in data:
        if isinstance(entry, list):
            yield from entry
        else:
            yield entry


def _sample(path: Path, index: int, entry: object) -> dict[str, SampleInput]:
    if not isinstance(entry, dict) or not entry:
        raise InputDataError(
            path, "must be an object of input names", sample=index, value=entry, has_value=True
        )
    return {str(name): _input(path, index, str(name), value) for name, value in entry.items()}


def _input(path: Path, index: int, name: str, value: object) -> SampleInput:
    def fail(reason: str, shown: object) -> InputDataError:
        return InputDataError(
            path, reason, sample=index, input_name=name, value=shown, has_value=True
        )

    if isinstance(value, list):
        return SampleInput(values=_elements(value, fail))
    if not isinstance(value, dict):
        raise fail('must be a list of elements, or an object with "content" or "b64"', value)
    unknown = sorted(set(value) - _TENSOR_KEYS)
    if unknown:
        raise fail(
            "has a key perf_analyzer does not read (allowed: content, shape, b64)", unknown[0]
        )
    shape = _shape(value["shape"], fail) if "shape" in value else None
    if "b64" in value:
        if "content" in value:
            raise fail('gives both "content" and "b64"', value)
        return SampleInput(raw=_b64(value["b64"], fail), shape=shape)
    if "content" not in value:
        raise fail('has no "content" (nor "b64")', value)
    content = value["content"]
    if isinstance(content, dict) and set(content) == {"b64"}:
        return SampleInput(raw=_b64(content["b64"], fail), shape=shape)
    if not isinstance(content, list):
        raise fail('"content" must be a list of elements or {"b64": ...}', content)
    return SampleInput(values=_elements(content, fail), shape=shape)


def _elements(values: list[Any], fail: Any) -> tuple[Element, ...]:
    """The elements of a (possibly nested) list, flat, in row-major order."""
    flat: list[Element] = []
    pending: list[Any] = list(reversed(values))
    while pending:
        value = pending.pop()
        if isinstance(value, list):
            pending.extend(reversed(value))
        elif isinstance(value, bool | int | float | str):
            flat.append(value)
        else:
            raise fail("each element must be a number, true/false or a string", value)
    return tuple(flat)


def _shape(shape: object, fail: Any) -> tuple[int, ...]:
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise fail('"shape" must be a list of whole numbers, 0 or more', shape)
    return tuple(shape)


def _b64(text: object, fail: Any) -> bytes:
    if not isinstance(text, str):
        raise fail('"b64" must be a base64 string', text)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise fail('"b64" is no valid base64', text) from None
