"""Friendly units for config values: durations (``500ms``, ``2s``, ``1h30m``) and rates (``2/s``).

Users write what Prometheus and Triton's docs write; the rest of the code only ever
sees floats in base units (seconds, events per second).
"""

from __future__ import annotations

import math
import re

_DURATION_UNITS_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(ms|s|m|h|d)\s*$")

DURATION_HINT = "a duration like 500ms, 2s, 5m, 1h or 1h30m"
RATE_HINT = "a rate like 2/s, 30/m or 100/h"


def _as_float(value: float, hint: str) -> float:
    """``float()`` of a YAML number; an integer beyond the float range (``1e400`` written
    out in digits) raises OverflowError, which the caller reports like any bad value."""
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"must be {hint}") from None


def parse_duration(value: object) -> float:
    """Returns ``value`` in seconds.

    Accepts numbers (already seconds) and strings made of one or more
    ``<number><unit>`` parts with units ms, s, m, h, d (``"1h30m"``).

    Raises:
        ValueError: with a message that shows the accepted forms.
    """
    if isinstance(value, bool):
        raise ValueError(f"must be {DURATION_HINT}")
    if isinstance(value, int | float):
        seconds = _as_float(value, DURATION_HINT)
    elif isinstance(value, str):
        text = value.strip()
        parts = _DURATION_PART.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise ValueError(f"must be {DURATION_HINT}")
        seconds = sum(float(number) * _DURATION_UNITS_SECONDS[unit] for number, unit in parts)
    else:
        raise ValueError(f"must be {DURATION_HINT}")
    if not math.isfinite(seconds):
        raise ValueError(f"must be {DURATION_HINT}")
    return seconds


def parse_rate(value: object) -> float:
    """Returns ``value`` in events per second; numbers are taken as per second."""
    if isinstance(value, bool):
        raise ValueError(f"must be {RATE_HINT}")
    if isinstance(value, int | float):
        rate = _as_float(value, RATE_HINT)
    elif isinstance(value, str) and (match := _RATE.match(value)):
        rate = float(match.group(1)) / _DURATION_UNITS_SECONDS[match.group(2)]
    else:
        raise ValueError(f"must be {RATE_HINT}")
    if not math.isfinite(rate):
        raise ValueError(f"must be {RATE_HINT}")
    return rate


def format_duration(seconds: float) -> str:
    """Writes seconds back the way a user would (``0.5`` → ``500ms``), for messages."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= size and float(seconds / size).is_integer():
            return f"{int(seconds / size)}{unit}"
    return f"{seconds * 1000:g}ms"
