"""The engine sending requests made per send (engine_wires.VaryingRequests), on one kept
HTTP/1.1 connection: each send its own request, in order, none sent twice."""

from __future__ import annotations

import asyncio
import itertools
import time

from engine_support import OK, Recorder, answer_each, raw_server, until

from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.engine_wires import VaryingRequests
from tritonwatch.wire.http2 import UnaryRequest
from tritonwatch.wire.limits import HttpRequest

SENDS = 12


def test_each_send_gets_the_request_made_for_it() -> None:
    """Breaks if the engine sends a varying canary's request twice, skips one, sends
    them out of order, or opens a connection per request instead of keeping one."""
    counter = itertools.count()
    made: list[bytes] = []

    def make() -> HttpRequest | UnaryRequest:
        body = f"{next(counter):04d}".encode()
        request = (
            b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n"
            b"Content-Length: 4\r\n\r\n" + body
        )
        made.append(request)
        return HttpRequest(request)

    canary = Recorder(gap=0.005)
    engine = CanaryEngine()
    with raw_server(answer_each(OK)) as server:

        async def main() -> None:
            serving = engine.serve(
                canary,
                "127.0.0.1",
                server.port,
                VaryingRequests(make, grpc=False),
                timeout=2.0,
                max_in_flight=1,
                first_send=time.monotonic() + 0.01,
            )
            task = asyncio.create_task(serving)
            await until(lambda: len(canary.answers) >= SENDS, f"{SENDS} answers")
            canary.allow = False
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

        try:
            asyncio.run(main())
        finally:
            engine.stop()
        received = list(server.requests)
        connections = set(server.served)
    answered = [a for _, a in canary.answers if not isinstance(a, BaseException)]
    assert len(answered) >= SENDS
    assert received == made[: len(received)]
    assert [r[-4:] for r in received] == [f"{n:04d}".encode() for n in range(len(received))]
    assert len(connections) == 1
