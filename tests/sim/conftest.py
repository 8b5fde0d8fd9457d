"""Fixtures for the simulator tests: running simulators, clients, the fixtures folder."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

import support
from tritonwatch.sim.server import Simulator

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The repository's real-data fixtures; a missing folder fails the tests that need it."""
    path = support.fixtures_dir()
    assert path.is_dir(), f"fixtures folder not found: {path}"
    return path


@pytest.fixture
def start_sim() -> Iterator[Callable[..., Simulator]]:
    """Starts simulators with custom arguments on free ports; stops them at teardown."""
    started: list[Simulator] = []

    def start(**kwargs: Any) -> Simulator:
        simulator = Simulator(**kwargs).start()
        started.append(simulator)
        return simulator

    yield start
    for simulator in started:
        simulator.stop()


@pytest.fixture
def sim(start_sim: Callable[..., Simulator]) -> Simulator:
    """A simulator with the built-in models."""
    return start_sim(seed=0)


@pytest.fixture
def http(sim: Simulator) -> Iterator[httpclient.InferenceServerClient]:
    """A sync ``tritonclient.http`` client of ``sim``."""
    client = httpclient.InferenceServerClient(sim.http_url.removeprefix("http://"))
    yield client
    client.close()


@pytest.fixture
def grpc(sim: Simulator) -> Iterator[grpcclient.InferenceServerClient]:
    """A sync ``tritonclient.grpc`` client of ``sim``."""
    client = grpcclient.InferenceServerClient(sim.grpc_url)
    yield client
    client.close()
