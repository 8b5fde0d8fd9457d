"""Structured logging: JSON lines for machines, colour for people, secrets never.

Every line carries ``component`` (which part of the daemon spoke) and passes through
:class:`Redactor`, which blanks secret-looking keys and every secret value the
current config holds, wherever it appears in the line.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Iterable, MutableMapping
from typing import Any, Literal, TextIO

from pydantic import SecretStr

from tritonwatch.common.structlog_lean import console_renderer, structlog

LogFormat = Literal["auto", "json", "console"]
REDACTED = "[redacted]"
DEFAULT_COMPONENT = "tritonwatch"
_SECRET_KEY = re.compile(r"password|passwd|token|secret|authorization|api_key|webhook_url", re.I)


class Redactor:
    """A structlog processor that removes secrets from log events.

    The set of secret values is replaced on every config (re)load, so a rotated
    credential is redacted from the moment it is configured.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._secrets: tuple[str, ...] = ()

    def set_secrets(self, secrets: Iterable[str]) -> None:
        # Longest first, so a secret that contains another is replaced whole.
        values = sorted({s for s in secrets if s}, key=len, reverse=True)
        with self._lock:
            self._secrets = tuple(values)

    def _scrub(self, value: Any) -> Any:
        if isinstance(value, SecretStr):
            return REDACTED
        if isinstance(value, str):
            for secret in self._secrets:
                value = value.replace(secret, REDACTED)
            return value
        if isinstance(value, dict):
            return {
                k: REDACTED if _SECRET_KEY.search(str(k)) else self._scrub(v)
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self._scrub(item) for item in value]
        return value

    def __call__(
        self, _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        for key, value in list(event_dict.items()):
            if _SECRET_KEY.search(key):
                event_dict[key] = REDACTED
            else:
                event_dict[key] = self._scrub(value)
        return event_dict


REDACTOR = Redactor()
"""The process-wide redactor: logging is process-wide state, so its filter is too."""


def _default_component(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    event_dict.setdefault("component", DEFAULT_COMPONENT)
    return event_dict


def configure_logging(
    log_format: LogFormat = "auto", level: str = "info", stream: TextIO | None = None
) -> None:
    """Sets up structlog for the process: call once, from the command's entry point.

    Args:
        log_format: ``json``, ``console``, or ``auto`` (console when ``stream`` is a TTY).
        level: the lowest level written (debug, info, warning, error).
        stream: where lines go; standard output by default.
    """
    out = stream if stream is not None else sys.stdout
    use_console = log_format == "console" or (log_format == "auto" and out.isatty())
    renderer: Any = console_renderer() if use_console else structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _default_component,
            structlog.processors.format_exc_info,
            REDACTOR,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )


def get_logger(component: str) -> structlog.typing.FilteringBoundLogger:
    """A logger whose every line says which ``component`` wrote it."""
    # get_logger(**initial_values) stays a lazy proxy: binding now would freeze the
    # configuration in force at import time, before configure_logging ran.
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(component=component)
    return logger
