"""Reads a YAML config file into a validated :class:`Config`, or fails with every problem.

``tritonwatch check-config``, ``tritonwatch run`` and SIGHUP reloads all go through
:func:`load_config`, so a file that one accepts the others accept too, and their
error messages are identical.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from tritonwatch.config.checks import cross_field_problems
from tritonwatch.config.errors import ConfigError, Problem, problems_from_validation
from tritonwatch.config.schema import Config
from tritonwatch.config.strict_yaml import read_mapping


def parse_config(text: str, source: str) -> Config:
    """Validates config ``text``; ``source`` names it in error messages.

    Raises:
        ConfigError: listing every problem found.
    """
    document = read_mapping(text, source)
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
