"""The bounded request every model API call and scrape goes through: outcomes, never
exceptions, never unbounded."""

from __future__ import annotations

import gzip
import time
from collections.abc import Iterator

import pytest
import requests

from stub_server import Route, StubServer
from support import assert_within_smoke_bound
from tritonwatch.records.target_state import FetchStatus
from tritonwatch.triton_api.fetch import FetchResult, fetch


@pytest.fixture
def session() -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


def get(
    session: requests.Session, url: str, timeout: float = 2.0, max_bytes: int = 1000
) -> FetchResult:
    return fetch(session, url, deadline=time.monotonic() + timeout, max_bytes=max_bytes)


def test_a_200_body_is_read_whole(stub: StubServer, session: requests.Session) -> None:
    """A 200 answer sent in chunks comes back whole, with its status and duration."""
    stub.routes["/metrics"] = Route(body=b"x" * 1000, chunks=4)
    result = get(session, f"{stub.url}/metrics")
    assert result.status is FetchStatus.SUCCESS and result.ok
    assert result.body == b"x" * 1000
    assert result.http_status == 200
    assert 0 < result.duration_seconds < 2


def test_a_gzipped_body_is_decoded_and_capped_decoded(
    stub: StubServer, session: requests.Session
) -> None:
    """Triton's prometheus-cpp exposer gzips when asked: the cap counts what it expands to."""
    page = b"nv_inference_count 1\n" * 100
    stub.routes["/metrics"] = Route(body=gzip.compress(page), headers={"Content-Encoding": "gzip"})
    assert get(session, f"{stub.url}/metrics", max_bytes=len(page)).body == page
    result = get(session, f"{stub.url}/metrics", max_bytes=len(page) - 1)
    assert result.status is FetchStatus.TOO_LARGE


def test_another_status_keeps_its_body(stub: StubServer, session: requests.Session) -> None:
    """The body of an error says whether the API or only the model is missing."""
    stub.routes["/v2/models/m/stats"] = Route(404, b'{"error":"unknown model"}')
    result = get(session, f"{stub.url}/v2/models/m/stats")
    assert (result.status, result.http_status) == (FetchStatus.HTTP_ERROR, 404)
    assert result.body == b'{"error":"unknown model"}'
    assert result.error == "HTTP 404"


@pytest.mark.parametrize("length", [True, False], ids=["declared", "undeclared"])
def test_a_body_over_the_cap_is_too_large(
    stub: StubServer, session: requests.Session, length: bool
) -> None:
    """Refused from Content-Length when declared, by counting bytes when not."""
    stub.routes["/metrics"] = Route(body=b"x" * 5000, chunks=5, length=length)
    result = get(session, f"{stub.url}/metrics", max_bytes=1000)
    assert result.status is FetchStatus.TOO_LARGE
    assert result.body == b""


def test_a_stalled_server_is_a_timeout(stub: StubServer, session: requests.Session) -> None:
    """A server that stalls is a timeout ended by the fetch's own timeout."""
    stub.routes["/metrics"] = Route(stall=True)
    result = get(session, f"{stub.url}/metrics", timeout=0.2)
    assert result.status is FetchStatus.TIMEOUT
    assert 0.15 < result.duration_seconds < 1.0


def test_a_trickling_body_is_cut_at_the_deadline(
    stub: StubServer, session: requests.Session
) -> None:
    """Each chunk arrives well within the socket timeout, the whole body does not: the
    deadline between chunks stops it (requests' own timeout alone never would)."""
    stub.routes["/metrics"] = Route(body=b"x" * 20, chunks=20, gap_s=0.2)  # 4 s in all
    result = get(session, f"{stub.url}/metrics", timeout=0.3)
    assert result.status is FetchStatus.TIMEOUT
    assert_within_smoke_bound(result.duration_seconds, 0.3, "a fetch past its deadline")


def test_nothing_listening_is_a_connection_error(
    closed_url: str, session: requests.Session
) -> None:
    """Nothing listening is a connection error saying the connection was refused."""
    result = get(session, f"{closed_url}/metrics")
    assert result.status is FetchStatus.CONNECTION_ERROR
    assert "refused" in result.error.lower()


def test_no_time_left_sends_nothing(stub: StubServer, session: requests.Session) -> None:
    """A fetch with its deadline already past is a timeout that sends no request."""
    result = fetch(session, f"{stub.url}/metrics", deadline=time.monotonic() - 1)
    assert result.status is FetchStatus.TIMEOUT
    assert stub.requests == []
