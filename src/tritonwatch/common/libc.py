"""The process's C library through ctypes, loaded once, for the few calls Python leaves
unwrapped: ``prctl`` (probe/canary/timer_slack.py) and ``mallopt`` (malloc_arenas.py).

One loader, so both ask for it the same way (errno kept, for ``ctypes.get_errno``) and
neither pays for a second ``dlopen``. ``ctypes`` itself is imported on first use: the
daemon's import path stays as lean as before (tests/test_import_footprint.py).
"""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def load_libc() -> Any | None:
    """The C library the interpreter runs on, the same handle every call; None where it
    cannot be loaded (a platform where ``CDLL(None)`` means nothing, a refused load)."""
    try:
        import ctypes  # noqa: PLC0415 - only the daemon's start and the canary's threads need it

        return ctypes.CDLL(None, use_errno=True)
    except (OSError, TypeError):  # TypeError: Windows takes no None for a library name
        return None
