"""``structlog`` imported without ``rich`` and ``greenlet``, which the daemon never uses.

``import structlog`` imports ``structlog.dev``, which imports ``rich`` (and with it
``pygments``) whenever it is installed: about 5 MiB of RSS in a daemon that writes JSON
lines (issue 15's footprint). Hiding ``rich`` for that one import leaves
``structlog.dev`` without it; :func:`console_renderer` re-imports ``structlog.dev``
with ``rich`` the first time a person asks for console output, so the console looks
exactly as it does with a plain ``import structlog`` (rich tracebacks included).

``import structlog`` also imports its deprecated ``structlog.threadlocal``, which loads
``greenlet`` (installed for gevent, which ``tritonclient.http`` uses) to pick a
greenlet-aware thread-local: about 1.1 MiB of RSS for a class the daemon never touches.
Hidden, ``threadlocal`` falls back to ``threading.local``; ``greenlet`` itself still
imports normally afterwards (gevent gets it when a tool loads ``tritonclient.http``).

Nothing changes for a package that was imported before this module, or when
``structlog`` was.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

_HIDDEN = (
    ()
    if "structlog" in sys.modules
    else tuple(name for name in ("rich", "greenlet") if name not in sys.modules)
)
for _name in _HIDDEN:
    sys.modules[_name] = None  # type: ignore[assignment]  # makes `import <name>` fail
try:
    import structlog
finally:
    for _name in _HIDDEN:
        del sys.modules[_name]

__all__ = ["console_renderer", "structlog"]


def console_renderer() -> structlog.dev.ConsoleRenderer:
    """structlog's default ``ConsoleRenderer``, with ``rich`` when it is installed."""
    if (
        getattr(structlog.dev, "rich", None) is None
        and importlib.util.find_spec("rich") is not None
    ):
        importlib.reload(structlog.dev)
    return structlog.dev.ConsoleRenderer()
