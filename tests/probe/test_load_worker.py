"""The load worker's open loop against an in-process HTTP server that leaves some
requests unanswered: a timed-out or failed request costs its client, never the loop."""

from __future__ import annotations

import asyncio
import contextlib

from tritonwatch.sweep.spec import LoadSpec
from tritonwatch.sweep.worker import LoadWorker, WindowSamples

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


def _open_loop_against(hang_first: int, concurrency: int) -> tuple[WindowSamples, dict[str, int]]:
    """Runs an open loop (50/s, 0.5 s timeout) until 20 requests were answered and the
    ``hang_first`` the server left unanswered timed out; the window and the connections
    the server saw: connections, requests, and requests on a connection whose earlier
    request it left unanswered."""
    seen = {"requests": 0, "connections": 0, "after_a_hang": 0}
    writers: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen["connections"] += 1
        writers.append(writer)
        hung_here = False
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while await reader.readuntil(b"\r\n\r\n"):
                seen["requests"] += 1
                seen["after_a_hang"] += hung_here
                if seen["requests"] > hang_first:
                    writer.write(ANSWER)
                hung_here = hung_here or seen["requests"] <= hang_first

    async def run() -> WindowSamples:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        request = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"
        spec = LoadSpec("http", "127.0.0.1", port, request, "rate", concurrency, 50.0, 0.5)
        worker = LoadWorker(spec)
        await worker.start()
        try:
            for _ in range(500):
                await asyncio.sleep(0.01)
                if len(worker._window.latencies) >= 20 and worker._window.timeouts >= hang_first:
                    break
        finally:
            window = worker.cut()
            await worker.stop()
            for writer in writers:
                writer.close()
            server.close()
            await server.wait_closed()
        return window

    return asyncio.run(run()), seen


def test_more_timeouts_than_clients_leave_the_open_loop_sending() -> None:
    """Breaks if a request that timed out takes its client out of the open loop for
    good (after ``concurrency`` timeouts nothing more would be sent), or if a client
    whose request timed out is used again instead of a new connection."""
    window, seen = _open_loop_against(hang_first=3, concurrency=2)
    assert window.timeouts >= 3  # (more where a request waited past its time for a client)
    assert window.errors == 0
    assert len(window.latencies) >= 20
    assert seen["after_a_hang"] == 0
    assert seen["connections"] >= 2 + 2  # the first two, and new ones for those that hung
