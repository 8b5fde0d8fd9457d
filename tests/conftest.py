"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import settings

import kinds
from real_mlserver import RealMLServer
from real_triton import ALL_MODELS, RealTriton
from support import ReadyEndpoint

settings.register_profile("suite", derandomize=True, deadline=None, database=None)
settings.load_profile("suite")
"""Every property test draws the same examples on every run and host, and none fails for
taking long on a busy machine: a red run is a bug, found again by running it again."""


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


TRITON_STARTS_LOG = "TRITONWATCH_TRITON_STARTS_LOG"
"""Each ``RealTriton.start()`` adds a line to this file (tests/real_triton.py)."""


def pytest_configure(config: pytest.Config) -> None:
    """The controller names the starts log before xdist spawns its workers, so every
    worker writes to the same file."""
    if not hasattr(config, "workerinput") and TRITON_STARTS_LOG not in os.environ:
        handle, log = tempfile.mkstemp(prefix="tritonwatch-triton-starts-", suffix=".log")
        os.close(handle)
        os.environ[TRITON_STARTS_LOG] = log


TRITON_STARTS_BUDGET = 6


def _triton_starts(config: pytest.Config) -> list[str] | None:
    """The lines of the starts log, on the controller (None on a worker)."""
    log = os.environ.get(TRITON_STARTS_LOG)
    if hasattr(config, "workerinput") or not log or not Path(log).exists():
        return None
    return Path(log).read_text().splitlines()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """More tritonserver starts than the budget fail the run: a new private server, or
    shared-server tests split over workers, costs every run a minute."""
    starts = _triton_starts(session.config)
    if starts is not None and len(starts) > TRITON_STARTS_BUDGET:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    starts = _triton_starts(config)
    if starts is None:
        return
    verdict = (
        ""
        if len(starts) <= TRITON_STARTS_BUDGET
        else f", over the budget of {TRITON_STARTS_BUDGET}:"
    )
    terminalreporter.write_line(f"tritonserver starts: {len(starts)}{verdict}")
    if verdict:
        for line in starts:
            terminalreporter.write_line(f"  {line}")


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the xdist_group markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    kinds.classify(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with kinds.guarded(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with kinds.guarded(item):
        return (yield)
