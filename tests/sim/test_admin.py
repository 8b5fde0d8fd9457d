"""The ``/sim`` admin endpoint: loopback only, validated input, state that tells the truth."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from tritonwatch.sim.admin import add_admin_routes, is_loopback
from tritonwatch.sim.server import Simulator
from tritonwatch.sim.testing import fetch

pytestmark = pytest.mark.sim


def post(url: str, document: object, method: str = "POST") -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=json.dumps(document).encode(), method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize(
    ("peer", "allowed"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.7", False),
        ("192.168.1.20", False),
        ("2001:db8::1", False),
        ("", False),
        (None, False),
        ("not-an-address", False),
    ],
)
def test_only_loopback_peers_are_admitted(peer: str | None, allowed: bool) -> None:
    """Loopback in all its spellings passes; everything else does not."""
    assert is_loopback(peer) is allowed


class _Transport:
    def __init__(self, peer: tuple[str, int]) -> None:
        self._peer = peer

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self._peer if name == "peername" else default


def test_remote_peer_gets_403_before_anything_happens() -> None:
    """A request from another host is refused without touching the simulator."""

    class Untouchable:
        def state(self) -> dict[str, Any]:
            raise AssertionError("the admin handler ran for a remote peer")

    async def main() -> web.StreamResponse:
        app = web.Application()
        add_admin_routes(app, Untouchable())  # type: ignore[arg-type]
        request = make_mocked_request(
            "GET", "/sim/state", app=app, transport=_Transport(("10.1.2.3", 4000))
        )
        match = await app.router.resolve(request)
        return await match.handler(request)

    response = asyncio.run(main())
    assert response.status == 403


def test_state_lists_models_gpus_and_faults(sim: Simulator) -> None:
    """GET /sim/state reports scenario, instances and delay per model, and the GPUs."""
    state = json.loads(fetch(sim.http_url + "/sim/state"))
    simple = next(model for model in state["models"] if model["name"] == "simple")
    assert simple == {
        "name": "simple",
        "version": "1",
        "state": "READY",
        "scenario": "healthy",
        "instance_count": 1,
        "max_batch_size": 8,
        "max_queue_delay_microseconds": 100,
        "pending": 0,
    }
    assert [gpu["uuid"][-1] for gpu in state["gpus"]] == ["0", "1", "2"]
    assert state["faults"] == []


def test_bad_requests_are_rejected_with_the_reason(sim: Simulator) -> None:
    """Unknown scenarios list the valid names; invalid faults name the field."""
    status, body = post(sim.http_url + "/sim/scenario", {"name": "on-fire"})
    assert status == 400
    assert body["error"].startswith("scenario must be one of ['compute-bound',")
    status, body = post(sim.http_url + "/sim/fault", {"kind": "latency_spike", "factor": -2})
    assert status == 400
    assert "latency_spike.factor: Input should be greater than 0" in body["error"]
    status, body = post(sim.http_url + "/sim/fault", {"kind": "meteor"})
    assert status == 400
    status, body = post(sim.http_url + "/sim/scenario", {"name": "healthy", "model": "nope"})
    assert (status, body["error"]) == (404, "Request for unknown model: 'nope' is not found")


def test_faults_are_listed_and_cleared(sim: Simulator) -> None:
    """POST /sim/fault returns an id listed in the state; DELETE /sim/fault clears all."""
    status, body = post(
        sim.http_url + "/sim/fault", {"kind": "slow_metrics", "delay_s": 0, "duration_s": 60}
    )
    assert status == 200
    faults = json.loads(fetch(sim.http_url + "/sim/state"))["faults"]
    assert [(f["id"], f["kind"]) for f in faults] == [(body["id"], "slow_metrics")]
    assert 59 < faults[0]["remaining_s"] <= 60
    assert post(sim.http_url + "/sim/fault", {}, method="DELETE") == (200, {"cleared": True})
    assert json.loads(fetch(sim.http_url + "/sim/state"))["faults"] == []
