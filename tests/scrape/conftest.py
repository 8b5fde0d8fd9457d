"""Fixtures of the scrape tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sim_traffic import FakeClock

from stub_server import StubServer
from tritonwatch.sim.server import Simulator


@pytest.fixture
def stub() -> Iterator[StubServer]:
    server = StubServer()
    yield server
    server.close()


@pytest.fixture
def sim() -> Iterator[Simulator]:
    """An in-process simulator with the default models (seeded)."""
    with Simulator(seed=0) as simulator:
        yield simulator


@pytest.fixture
def clock() -> FakeClock:
    """A clock the test moves by hand."""
    return FakeClock()
