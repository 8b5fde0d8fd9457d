"""``structlog`` imported without ``rich``, which only its console renderer uses.

``import structlog`` imports ``structlog.dev``, which imports ``rich`` (and with it
``pygments``) whenever it is installed: about 5 MiB of RSS in a daemon that writes JSON
lines (issue 15's footprint). Hiding ``rich`` for that one import leaves
``structlog.dev`` without it; :func:`console_renderer` re-imports ``structlog.dev``
with ``rich`` the first time a person asks for console output, so the console looks
exactly as it does with a plain ``import structlog`` (rich tracebacks included).
Nothing changes when ``rich`` or ``structlog`` were imported before this module.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

_HIDE_RICH = "rich" not in sys.modules and "structlog" not in sys.modules
if _HIDE_RICH:
    sys.modules["rich"] = None  # type: ignore[assignment]  # makes `import rich` fail
try:
    import structlog
finally:
    if _HIDE_RICH:
        del sys.modules["rich"]

__all__ = ["console_renderer", "structlog"]


def console_renderer() -> structlog.dev.ConsoleRenderer:
    """structlog's default ``ConsoleRenderer``, with ``rich`` when it is installed."""
    if (
        getattr(structlog.dev, "rich", None) is None
        and importlib.util.find_spec("rich") is not None
    ):
        importlib.reload(structlog.dev)
    return structlog.dev.ConsoleRenderer()
