"""Fixtures of the model API client's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stub_server import StubServer


@pytest.fixture
def stub() -> Iterator[StubServer]:
    """A loopback HTTP server answering from a table of routes (a bare 404 elsewhere)."""
    server = StubServer()
    yield server
    server.close()
