"""Annotated field types shared by the config schema.

Each type carries its own validation and its own error message, phrased the way
APScheduler's validators phrase theirs ("must be positive"); the loader adds the
file, the field path and the offending value.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, SecretStr
from pydantic_core import PydanticCustomError

from tritonwatch.config.units import parse_duration, parse_rate

_ENV_REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_FILE_REFERENCE = re.compile(r"^\$\{file:([^}]+)\}$")


def _custom(message: str) -> PydanticCustomError:
    """An error whose text the loader shows as is (no "Value error, " prefix)."""
    return PydanticCustomError("tritonwatch", message)


def _positive_duration(value: object) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as error:
        raise _custom(str(error)) from None
    if seconds <= 0:
        raise _custom("must be positive")
    return seconds


def _positive_rate(value: object) -> float:
    try:
        rate = parse_rate(value)
    except ValueError as error:
        raise _custom(str(error)) from None
    if rate <= 0:
        raise _custom("must be positive")
    return rate


def _open_unit_interval(value: float) -> float:
    if not 0.0 < value < 1.0:
        raise _custom("must be between 0 and 1, both excluded")
    return value


def _closed_unit_interval(value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise _custom("must be between 0 and 1")
    return value


def _positive_int(value: int) -> int:
    if value <= 0:
        raise _custom("must be a positive integer")
    return value


def _non_empty(value: str) -> str:
    if not value.strip():
        raise _custom("must not be empty")
    return value


MAX_SECRET_FILE_BYTES = 64 * 1024


def _read_secret_file(path: str) -> str:
    """The file's text without the trailing newline ``echo`` and editors add (Docker
    and Kubernetes mount secrets as files; the file may change between reloads)."""
    try:
        with Path(path).open("rb") as file:
            data = file.read(MAX_SECRET_FILE_BYTES + 1)
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise _custom(f"refers to secret file {path}, which cannot be read ({reason})") from None
    if len(data) > MAX_SECRET_FILE_BYTES:
        raise _custom(f"refers to secret file {path}, which is larger than 64 KiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _custom(f"refers to secret file {path}, which is not UTF-8 text") from None
    text = text.removesuffix("\n").removesuffix("\r")
    if not text:
        raise _custom(f"refers to secret file {path}, which is empty")
    return text


def _expand_env_reference(value: object) -> object:
    """Lets a secret be written as ``${NAME}`` (an environment variable) or
    ``${file:/run/secrets/name}`` (a file), so it lives outside the config file."""
    if isinstance(value, str) and (match := _FILE_REFERENCE.match(value)):
        return _read_secret_file(match.group(1))
    if isinstance(value, str) and (match := _ENV_REFERENCE.match(value)):
        name = match.group(1)
        if name not in os.environ:
            raise _custom(f"refers to environment variable {name}, which is not set")
        return os.environ[name]
    return value


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as error:
        raise _custom(f"is not a valid regular expression ({error})") from None
    return value


def _auto_bool(value: object) -> object:
    if isinstance(value, bool) or value == "auto":
        return value
    raise _custom("must be auto, true or false")


def url_with_scheme(schemes: tuple[str, ...]) -> AfterValidator:
    """Accepts URLs starting with one of ``schemes`` and a host part."""
    listed = ", ".join(f"{scheme}://" for scheme in schemes[:-1]) + f" or {schemes[-1]}://"

    def check(value: str) -> str:
        scheme, separator, rest = value.partition("://")
        if not separator or scheme.lower() not in schemes or not rest.strip("/"):
            raise _custom(f"must be a URL starting with {listed}")
        return value.rstrip("/")

    return AfterValidator(check)


Duration = Annotated[float, BeforeValidator(_positive_duration)]
"""A positive duration in seconds, written ``500ms``, ``2s``, ``5m``, ``1h`` or as a number."""

Rate = Annotated[float, BeforeValidator(_positive_rate)]
"""A positive rate in events per second, written ``2/s``, ``30/m`` or as a number."""

Objective = Annotated[float, AfterValidator(_open_unit_interval)]
"""An SLO objective: the target fraction of good events, strictly between 0 and 1."""

Ratio = Annotated[float, AfterValidator(_closed_unit_interval)]
"""A ratio between 0 and 1 inclusive (utilisation thresholds)."""

AutoBool = Annotated[bool | Literal["auto"], BeforeValidator(_auto_bool)]
"""``auto`` (use it when available), ``true`` (required) or ``false``."""

PositiveInt = Annotated[int, AfterValidator(_positive_int)]

Name = Annotated[str, AfterValidator(_non_empty)]

Regex = Annotated[str, AfterValidator(_regex)]
"""A Python regular expression (``re``), checked when the file is read."""

Secret = Annotated[SecretStr, BeforeValidator(_expand_env_reference)]
"""A secret value, literal or ``${ENV_VAR}``; repr and logs never show it."""
