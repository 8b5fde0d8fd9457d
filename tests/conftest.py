"""Fixtures shared by every test folder."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from real_mlserver import RealMLServer
from real_triton import ALL_MODELS, RealTriton
from support import ReadyEndpoint


@pytest.fixture(autouse=True)
def _structlog_as_it_was() -> Iterator[None]:
    """A command run in-process (``main(["tune", ...])``) configures structlog for the
    whole process — its level, and pytest's captured stdout, closed after the test.
    Put back what was there, so a later test's ``capture_logs`` sees every level."""
    before = structlog.get_config()
    yield
    structlog.configure(**before)


@pytest.fixture
def ready_endpoint() -> Iterator[ReadyEndpoint]:
    endpoint = ReadyEndpoint()
    yield endpoint
    endpoint.close()


@pytest.fixture
def hanging_endpoint() -> Iterator[str]:
    """A port that accepts TCP connections (kernel backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


@pytest.fixture
def closed_url() -> str:
    """A loopback URL where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture(scope="session")
def real_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealTriton]:
    """One real tritonserver for the whole session, every test model loaded.

    Tests that change a model (config overrides, failure ratios) put it back with
    ``real_triton.reset(model)`` or use :func:`start_real_triton` for a server of their own.
    """
    server = RealTriton(log_path=tmp_path_factory.mktemp("triton") / "tritonserver.log").start()
    yield server
    server.stop()


@pytest.fixture
def start_real_triton(tmp_path: Path) -> Iterator[Callable[..., RealTriton]]:
    """Starts private real tritonservers (``RealTriton`` arguments); stops them at teardown."""
    started: list[RealTriton] = []

    def start(*models: str, **kwargs: Any) -> RealTriton:
        kwargs.setdefault("log_path", tmp_path / f"tritonserver-{len(started)}.log")
        server = RealTriton(models or ALL_MODELS, **kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def real_mlserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealMLServer]:
    """One real Seldon MLServer for the whole session (the ``echo`` model of
    tests/mlserver_models): a KServe v2 server without Triton's extensions."""
    server = RealMLServer(tmp_path_factory.mktemp("mlserver")).start()
    yield server
    server.stop()
