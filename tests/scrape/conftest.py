"""Fixtures of the scrape tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from stub_server import StubServer


@pytest.fixture
def stub() -> Iterator[StubServer]:
    server = StubServer()
    yield server
    server.close()
