"""Fixtures shared by every test folder."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from support import ReadyEndpoint


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
