"""A pytest plugin for ``make mutation``: a mutant's tests run fastest first.

mutmut hands pytest the tests that reached a mutant's function in no particular order
and stops at the first failure (``-x``). Here the test files run in the order of their
duration in mutmut's first run of every test (``mutmut-stats.json`` in its working
directory, ``mutants/``), each file's tests in the order they are written, so a mutant mostly dies
in a unit test file of a few milliseconds instead of after the simulator tests that
happen to come first. Files stay whole: their module fixtures and the order their tests
were written in hold as in any run. Without that file (mutmut's first run) the order
is left alone. The verdicts do not change, only how soon a failing test is reached.

mutation/run.py puts this folder on ``PYTHONPATH``; ``[tool.mutmut]
pytest_add_cli_args`` loads the plugin with ``-p fastest_first``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

STATS = Path("mutmut-stats.json")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not STATS.exists():
        return
    durations: dict[str, float] = json.loads(STATS.read_text()).get("duration_by_test", {})
    by_file: dict[str, float] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        by_file[path] = by_file.get(path, 0.0) + durations.get(item.nodeid, 0.0)

    def key(item: pytest.Item) -> tuple[float, str, int]:
        path = item.nodeid.split("::", 1)[0]
        return by_file[path], path, item.location[1] or 0

    items.sort(key=key)
