"""What the documentation tests share: scripts/generate_docs.py, loaded from its file."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest

from support import REPO


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "generate_docs", REPO / "scripts" / "generate_docs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
