"""The documents' generated parts agree with the code (scripts/generate_docs.py).

docs/architecture.md's package list and contract table are written from
``src/tritonwatch`` and ``pyproject.toml``: a package added, moved or removed, or a
contract changed, without regenerating them fails here.
"""

from __future__ import annotations

import re
from types import ModuleType

import pytest

from support import REPO

ARCHITECTURE = REPO / "docs" / "architecture.md"


def test_every_generated_part_is_fresh(generator: ModuleType) -> None:
    """Breaks if a generated part of a document differs from what the code says now."""
    assert generator.stale_parts([ARCHITECTURE]) == []


def test_architecture_names_every_package(generator: ModuleType) -> None:
    """Breaks if a package under src/tritonwatch is missing from docs/architecture.md."""
    text = (REPO / "docs" / "architecture.md").read_text()
    listed = set(re.findall(r"^\| `([a-z_.]+)` \|", text, re.M))
    packages = {name.removeprefix("tritonwatch.") for name in generator.packages()}
    assert packages - listed == set()
    assert {"records", "state", "runtime", "commands", "common", "wire", "probe.canary"} <= packages


def test_architecture_lists_every_contract_and_no_back_edge(generator: ModuleType) -> None:
    """Breaks if a contract in pyproject.toml is missing from the table, or excuses an import."""
    text = (REPO / "docs" / "architecture.md").read_text()
    for contract in generator._contracts():
        assert f"| {contract['name']} |" in text
        assert "ignore_imports" not in contract


def test_the_top_level_holds_packages_only(generator: ModuleType) -> None:
    """Breaks if a module is added beside the packages at src/tritonwatch's top level."""
    top = REPO / "src" / "tritonwatch"
    modules = {path.name for path in top.glob("*.py")}
    assert modules == {"__init__.py", "__main__.py"}


def test_a_missing_package_is_caught(
    generator: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Breaks if the freshness check cannot see a package the document does not list."""
    packages = generator.packages()
    monkeypatch.setattr(generator, "packages", lambda: [*packages, "tritonwatch.newcomer"])
    monkeypatch.setattr(generator, "_summary", lambda package: "A package nobody documented.")
    monkeypatch.setattr(generator, "_modules", lambda package: 0)
    assert generator.stale_parts([ARCHITECTURE]) == ["docs/architecture.md: packages"]


def test_no_module_is_over_600_lines() -> None:
    """Breaks if a module grows past 600 lines: split it by concern (issue 26)."""
    long = {
        str(path.relative_to(REPO)): count
        for path in (REPO / "src" / "tritonwatch").rglob("*.py")
        if (count := len(path.read_text().splitlines())) > 600
    }
    assert long == {}


def test_the_request_paths_name_modules_that_exist() -> None:
    """Breaks if docs/architecture.md's list of request paths names a module that is no
    longer there (a path removed or moved without the list saying so), or lists none."""
    text = ARCHITECTURE.read_text()
    section = text.split("## Request paths", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`((?:[a-z_]+/)+[a-z_0-9]+\.py)`", section))
    assert {"probe/canary/engine.py", "probe/canary/library_path.py"} <= named
    missing = {path for path in named if not (REPO / "src" / "tritonwatch" / path).is_file()}
    assert missing == set()
