"""The readiness probe turns every way a server can answer, or not, into an outcome."""

from __future__ import annotations

from support import ReadyEndpoint
from tritonwatch.probe.readiness import HttpReadinessProbe
from tritonwatch.records.observations import Outcome


def test_ready_server_is_up(ready_endpoint: ReadyEndpoint) -> None:
    """A server answering ready is up, with a success outcome and a duration."""
    probe = HttpReadinessProbe("t", ready_endpoint.url, timeout=2.0)
    observation = probe.check()
    probe.close()
    assert (observation.target, observation.ready, observation.outcome) == ("t", True, "success")
    assert 0 < observation.duration_seconds < 2.0


def test_not_ready_status_is_an_http_error(ready_endpoint: ReadyEndpoint) -> None:
    """A 503 readiness answer is not ready, an http_error saying HTTP 503."""
    ready_endpoint.status = 503
    probe = HttpReadinessProbe("t", ready_endpoint.url, timeout=2.0)
    observation = probe.check()
    assert (observation.ready, observation.outcome, observation.error) == (
        False,
        Outcome.HTTP_ERROR,
        "HTTP 503",
    )


def test_refused_connection_is_a_connection_error(closed_url: str) -> None:
    """A refused connection is a connection_error saying Connection refused."""
    observation = HttpReadinessProbe("t", closed_url, timeout=2.0).check()
    assert observation.outcome == Outcome.CONNECTION_ERROR
    assert observation.error == "Connection refused"


def test_hanging_server_is_a_timeout_bounded_by_the_probe_timeout(hanging_endpoint: str) -> None:
    """A server that never answers is a timeout ended by the probe's own timeout."""
    observation = HttpReadinessProbe("t", hanging_endpoint, timeout=0.3).check()
    assert observation.outcome == Outcome.TIMEOUT
    assert 0.25 < observation.duration_seconds < 2.0
