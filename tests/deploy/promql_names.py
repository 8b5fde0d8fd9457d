"""Metric names read off PromQL, and Grafana variables substituted the way Grafana would,
for tests of the dashboards (no Prometheus parser in Python: a small tokenizer does)."""

from __future__ import annotations

import re

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENTIFIER = re.compile(r"(?<![\w.:])[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "group_left", "group_right", "inf", "nan"}
)
_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")

GRAFANA_BUILTINS = {"__rate_interval": "1m", "__interval": "15s", "__range": "5m"}
"""Grafana's built-in variables as it would set them for a 5-minute view."""


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects (not functions, keywords, labels or durations)."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function call
        if match.group(0).lower() in _KEYWORDS:
            continue
        names.add(match.group(0))
    return names


def variables(expr: str) -> set[str]:
    """Names of the Grafana variables ``expr`` uses (``$x`` and ``${x}``)."""
    return {a or b for a, b in _VARIABLE.findall(expr)}


def substitute(expr: str, values: dict[str, str]) -> str:
    """``expr`` with every Grafana variable replaced; KeyError names an unknown one."""
    return _VARIABLE.sub(lambda m: values[m.group(1) or m.group(2)], expr)
