"""Command-line flags that can also be set through environment variables.

Every flag ``--some-flag`` of every command reads ``TRITONWATCH_SOME_FLAG`` as its
default, so containers and Kubernetes manifests configure the daemon without
building command lines (and secrets never need to appear in a process listing).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from typing import Any

ENV_PREFIX = "TRITONWATCH_"
_TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
_FALSE_WORDS = frozenset({"0", "false", "no", "off", ""})


def env_name(flag: str) -> str:
    """The variable that backs ``flag``: ``--log-level`` → ``TRITONWATCH_LOG_LEVEL``,
    ``--web.enable-lifecycle`` → ``TRITONWATCH_WEB_ENABLE_LIFECYCLE``."""
    return ENV_PREFIX + flag.lstrip("-").upper().replace("-", "_").replace(".", "_")


def parse_bool(text: str, *, source: str) -> bool:
    """Reads a boolean the way shells and container specs write one."""
    word = text.strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise argparse.ArgumentTypeError(f"{source} must be true or false, got: {text!r}")


def add_flag(
    parser: argparse.ArgumentParser,
    flag: str,
    *,
    environ: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> None:
    """Adds ``flag`` to ``parser`` with its default taken from the environment when set.

    Args:
        parser: the (sub)command parser.
        flag: the long option, e.g. ``--config``.
        environ: the environment to read (tests pass their own); ``os.environ`` by default.
        kwargs: as for ``ArgumentParser.add_argument``. ``action="store_true"`` is honoured
            for environment values too (``1/true/yes/on``); ``action="append"`` (a
            repeatable flag) reads the variable as comma-separated values.
    """
    env = env_name(flag)
    environment = os.environ if environ is None else environ
    help_text = kwargs.pop("help", "")
    kwargs["help"] = f"{help_text} [env: {env}]".strip()
    if kwargs.get("action") == "append":
        # A repeatable flag: the variable holds the values comma-separated, and the
        # first value on the command line replaces them (instead of adding to them).
        kwargs["action"] = _AppendOverDefault
        kwargs["default"] = _split_list(environment.get(env, ""))
        if kwargs["default"]:
            kwargs["required"] = False
    elif env in environment:
        raw = environment[env]
        if kwargs.get("action") == "store_true":
            kwargs["default"] = parse_bool(raw, source=env)
        else:
            # argparse runs ``type`` over string defaults, so conversions and their
            # error messages are the same as for the command line; ``choices`` it does
            # not check for defaults, so that check is made here.
            choices = kwargs.get("choices")
            if choices is not None and raw not in choices:
                listed = ", ".join(map(str, choices))
                parser.error(f"{env} must be one of {listed}, got: {raw!r}")
            kwargs["default"] = raw
        kwargs["required"] = False
    parser.add_argument(flag, **kwargs)


def _split_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


class _AppendOverDefault(argparse.Action):
    """``append`` whose default (from the environment) the command line replaces."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        current = getattr(namespace, self.dest, None)
        items = [] if current is None or current is self.default else list(current)
        setattr(namespace, self.dest, [*items, values])


Handler = Callable[[argparse.Namespace], int]
"""A command's entry point: takes the parsed arguments, returns the exit status."""
