"""The reference pages agree with the code: metrics, configuration, CLI and alerts
(``scripts/references.py``, written by ``make docs``).

The metrics page is read off a daemon that watched the demo's simulator, so this
module starts one (in a spawned process: the simulator); the rest are read off the
schema, the argument parser and the rule generator.
"""

from __future__ import annotations

import re
from types import ModuleType

import pytest

from support import REPO

pytestmark = pytest.mark.sim

REFERENCE = REPO / "docs" / "reference"


def test_every_reference_page_is_fresh(generator: ModuleType) -> None:
    """Breaks if a metric, a config field, a flag or an alert changed in the code and
    its reference page was not regenerated (``make docs``)."""
    pages = [REFERENCE / f"{name}.md" for name in ("metrics", "configuration", "cli", "alerts")]
    assert generator.stale_parts(pages) == []


def test_every_config_field_and_flag_says_what_it_means() -> None:
    """Breaks if a schema field or a command-line flag has no docstring or help: its
    reference row would say nothing."""
    for page in ("configuration", "cli"):
        rows = [line for line in (REFERENCE / f"{page}.md").read_text().splitlines()
                if line.startswith("| `")]  # fmt: skip
        empty = [row.split("|")[1].strip() for row in rows if row.rstrip().endswith("|  |")]
        assert rows and empty == [], (page, empty)


def test_the_cli_reference_names_every_command() -> None:
    """Breaks if a command of the parser is missing from the CLI reference."""
    text = (REFERENCE / "cli.md").read_text()
    commands = set(re.findall(r"^### `tritonwatch (\S+)`", text, re.M))
    assert {"run", "check-config", "demo", "simulate", "sweep", "tune", "rules"} <= commands
