"""The wire code's room is bounded: it imports the standard library, ``hpack`` and
itself, nothing else (issue 26). lint-imports checks the product's packages; this checks
the third-party side, which an import contract cannot list as an allowance."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import tritonwatch.wire

WIRE = Path(tritonwatch.wire.__file__).parent
ALLOWED_THIRD_PARTY = frozenset({"hpack"})


def _imported_roots(source: Path) -> set[str]:
    """Every module ``source`` imports (type-checking imports included), as full names."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_the_wire_code_imports_the_standard_library_and_hpack_only() -> None:
    """Breaks if a module under wire/ imports a third-party package other than hpack, or
    any part of tritonwatch outside wire/."""
    modules = sorted(WIRE.glob("*.py"))
    assert len(modules) >= 8  # the folder this test guards is the one it read
    strays = {
        f"{module.name}: {name}"
        for module in modules
        for name in _imported_roots(module)
        if not (
            name.split(".")[0] in sys.stdlib_module_names
            or name.split(".")[0] in ALLOWED_THIRD_PARTY
            or name == "tritonwatch.wire"
            or name.startswith("tritonwatch.wire.")
        )
    }
    assert not strays


def test_the_check_sees_a_stray_import(tmp_path: Path) -> None:
    """Breaks if the scan above would miss an import it must refuse."""
    planted = tmp_path / "planted.py"
    planted.write_text("import yaml\nfrom tritonwatch.config import schema\n")
    assert _imported_roots(planted) == {"yaml", "tritonwatch.config"}
