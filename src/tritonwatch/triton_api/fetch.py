"""One bounded HTTP request: a deadline, a size cap, and an outcome instead of an exception.

Every HTTP call of the model APIs and every ``/metrics`` scrape goes through
:func:`fetch`, so a hung, slow, huge or unreachable server costs one outcome, never a
stuck job or a daemon that runs out of memory. ``requests`` applies its timeout to the
connection and to each socket read separately, so the body is read as it arrives and
the deadline checked between reads: a server that trickles bytes is cut off within
about twice the time left, instead of never. The size cap counts decoded bytes (after
gzip), so a small compressed body cannot expand without limit.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import requests
from urllib3 import HTTPResponse
from urllib3.exceptions import HTTPError, ProtocolError, ReadTimeoutError

from tritonwatch.records.target_state import FetchStatus

DEFAULT_MAX_BYTES = 16 * 2**20
"""The largest body read (16 MiB): a 500-model Triton page is about 4 MiB."""

_CHUNK_BYTES = 64 * 2**10
_ERRNO_TEXT = re.compile(r"\[Errno -?\d+\] ([^'\")]+)")


@dataclass(frozen=True, slots=True)
class FetchResult:
    """The answer to one request. ``body`` is set for every HTTP status (an error's body
    says whether the server lacks the API or only the model), empty otherwise."""

    status: FetchStatus
    duration_seconds: float
    http_status: int | None = None
    body: bytes = b""
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is FetchStatus.SUCCESS


def short_error(error: Exception) -> str:
    """``Connection refused`` instead of urllib3's three nested exception reprs."""
    text = str(error)
    match = _ERRNO_TEXT.search(text)
    return match.group(1).strip() if match else text[:200]


class _CutShortError(Exception):
    """Reading stopped early: the body is too large, or the deadline passed."""

    def __init__(self, status: FetchStatus, error: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error


def _read_body(
    response: requests.Response, deadline: float, clock: Callable[[], float], max_bytes: int
) -> bytes:
    """The decoded body; :class:`_CutShortError` past the cap or the deadline.

    ``read1`` returns whatever one socket read brings (``iter_content`` would block until
    a whole chunk arrived), so the deadline is checked as bytes trickle in.
    """
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _CutShortError(
            FetchStatus.TOO_LARGE, f"Content-Length {declared} is over {max_bytes} bytes"
        )
    raw: HTTPResponse = response.raw
    chunks, size = [], 0
    while chunk := raw.read1(_CHUNK_BYTES, decode_content=True):
        size += len(chunk)
        if size > max_bytes:
            raise _CutShortError(FetchStatus.TOO_LARGE, f"body over {max_bytes} bytes")
        if clock() > deadline:
            raise _CutShortError(FetchStatus.TIMEOUT, "body still arriving at the deadline")
        chunks.append(chunk)
    return b"".join(chunks)


def _status_of(error: Exception) -> FetchStatus:
    """The outcome of an exception from requests (headers) or urllib3 (body)."""
    if isinstance(error, requests.Timeout | ReadTimeoutError):
        return FetchStatus.TIMEOUT
    if isinstance(error, requests.ConnectionError | ProtocolError):
        return FetchStatus.CONNECTION_ERROR
    return FetchStatus.BAD_RESPONSE


def fetch(
    session: requests.Session,
    url: str,
    *,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
    max_bytes: int = DEFAULT_MAX_BYTES,
    method: str = "GET",
    json_body: object = None,
) -> FetchResult:
    """Sends ``method`` to ``url`` (with ``json_body`` as JSON, when not None), giving up
    at monotonic time ``deadline`` or past ``max_bytes`` of answer.

    Returns:
        SUCCESS for a 200 whose body was read whole; HTTP_ERROR (with the body) for any
        other status; TIMEOUT, CONNECTION_ERROR, TOO_LARGE or BAD_RESPONSE otherwise.
        Never raises for anything the server does.
    """
    started = clock()
    remaining = deadline - started
    if remaining <= 0:
        return FetchResult(FetchStatus.TIMEOUT, 0.0, error="no time left in this scrape")
    try:
        with session.request(
            method, url, json=json_body, timeout=remaining, stream=True
        ) as response:
            body = _read_body(response, deadline, clock, max_bytes)
    except _CutShortError as cut:
        return FetchResult(cut.status, clock() - started, error=cut.error)
    except (requests.RequestException, HTTPError) as error:
        return FetchResult(_status_of(error), clock() - started, error=short_error(error))
    code = response.status_code
    if code != 200:
        return FetchResult(FetchStatus.HTTP_ERROR, clock() - started, code, body, f"HTTP {code}")
    return FetchResult(FetchStatus.SUCCESS, clock() - started, code, body)
