"""The simulator's admin endpoint under ``/sim/`` on the HTTP port, loopback only.

``GET /sim/state``, ``POST /sim/scenario``, ``POST /sim/fault``, ``DELETE /sim/fault``
and ``POST /sim/restart`` switch scenarios and inject faults while clients run. Peers
that are not on the loopback interface get 403, so binding the simulator to a public
address never exposes control of it.
"""

from __future__ import annotations

import ipaddress
import json
from typing import TYPE_CHECKING, Any

from aiohttp import web
from pydantic import ValidationError

from tritonwatch.sim.errors import SimError
from tritonwatch.sim.faults import parse_fault
from tritonwatch.sim.scenarios import UnknownScenarioError

if TYPE_CHECKING:
    from tritonwatch.sim.core import SimCore


def is_loopback(peer: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped loopback; False for anything else."""
    if not peer:
        return False
    try:
        address = ipaddress.ip_address(peer.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def _reply(document: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(document), status=status, content_type="application/json")


def _bad_request(message: str) -> web.Response:
    return _reply({"error": message}, status=400)


def _describe(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in item['loc']) or 'fault'}: {item['msg']}"
        for item in error.errors()
    )


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        return {}
    document = json.loads(raw)
    if not isinstance(document, dict):
        raise TypeError("the body must be a JSON object")
    return document


def add_admin_routes(app: web.Application, core: SimCore) -> None:
    """Adds the ``/sim/*`` routes for ``core`` to ``app``."""

    def guarded(handler: Any) -> Any:
        async def wrapper(request: web.Request) -> web.Response:
            if not is_loopback(request.remote):
                return _reply({"error": "the admin endpoint answers loopback peers only"}, 403)
            try:
                response: web.Response = await handler(request)
            except (ValueError, TypeError) as error:
                return _bad_request(str(error))
            except SimError as error:
                return _reply({"error": error.message}, status=error.code.http_status)
            return response

        return wrapper

    async def state(_: web.Request) -> web.Response:
        return _reply(core.state())

    async def scenario(request: web.Request) -> web.Response:
        document = await _body(request)
        name, model = document.get("name"), document.get("model")
        if not isinstance(name, str):
            return _bad_request("'name' must name a scenario")
        try:
            core.set_scenario(name, model)
        except UnknownScenarioError as error:
            return _bad_request(str(error))
        return _reply({"scenario": name, "model": model})

    async def fault(request: web.Request) -> web.Response:
        document = await _body(request)
        if document.get("kind") == "restart":
            core.restart()
            return _reply({"restarted": True, "restarts": core.restarts})
        try:
            parsed = parse_fault(document)
        except ValidationError as error:
            return _bad_request(_describe(error))
        return _reply({"id": core.inject_fault(parsed)})

    async def clear(_: web.Request) -> web.Response:
        core.clear_faults()
        return _reply({"cleared": True})

    async def restart(_: web.Request) -> web.Response:
        core.restart()
        return _reply({"restarted": True, "restarts": core.restarts})

    app.add_routes(
        [
            web.get("/sim/state", guarded(state)),
            web.post("/sim/scenario", guarded(scenario)),
            web.post("/sim/fault", guarded(fault)),
            web.delete("/sim/fault", guarded(clear)),
            web.post("/sim/restart", guarded(restart)),
        ]
    )
