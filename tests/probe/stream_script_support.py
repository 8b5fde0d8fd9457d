"""A scripted loopback HTTP/1.1 server for the stream tests, and the answers it sends.

Each request on a connection gets the next script of answers: parts written after a
delay each, so a test chooses where a stream's bytes split, when they come, and when
the connection closes. It runs on the test's event loop (asyncio.start_server).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

TEST_TIMEOUT_S = 30.0

Part = tuple[float, bytes]
"""(seconds to wait, bytes to write then)."""
CLOSE = b""
"""A part's bytes that close the connection instead (an answer cut short, or ended so)."""
HEAD_200 = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")  # fmt: skip
END = b"0\r\n\r\n"


def in_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Runs an async test in a fresh event loop, bounded by :data:`TEST_TIMEOUT_S`."""

    @functools.wraps(test)
    def run() -> None:
        asyncio.run(asyncio.wait_for(test(), TEST_TIMEOUT_S))

    return run


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def sse_answer(events: Sequence[tuple[float, str]], status: str = "200 OK") -> list[Part]:
    """A chunked ``text/event-stream`` answer: each event its own chunk after its delay."""
    head = (f"HTTP/1.1 {status}\r\nContent-Type: text/event-stream\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()  # fmt: skip
    parts: list[Part] = [(0.0, head)]
    parts += [(delay, chunk(f"data: {data}\n\n".encode())) for delay, data in events]
    return [*parts, (0.0, END)]


def event(text: str) -> bytes:
    """One generate_stream response as its own chunk."""
    return chunk(f"data: {json.dumps({'text_output': text})}\n\n".encode())


def tokens(*delays: float) -> list[Part]:
    """A 200 generate_stream answer: one token after each delay, then the terminal chunk."""
    return [(0.0, HEAD_200), *((d, event(f"t{k}")) for k, d in enumerate(delays)), (0.0, END)]


@dataclass
class ScriptedServer:
    """Answers every request on a connection with the next script of ``answers``."""

    answers: list[list[Part]]
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    served_on: list[int] = field(default_factory=list)
    """The connection (1, 2, …) each request came on, in the order of ``requests``."""
    port: int = 0
    _writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        self.connections += 1
        connection = self.connections
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length")), 0)  # fmt: skip
                self.requests.append(head + await reader.readexactly(length))
                self.served_on.append(connection)
                for delay, data in self.answers.pop(0):
                    await asyncio.sleep(delay)
                    if data == CLOSE:
                        return
                    writer.write(data)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ScriptedServer]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        async with server:
            try:
                yield self
            finally:
                await self._close_connections()

    async def _close_connections(self) -> None:
        """Every accepted connection closed before the loop ends (a transport left to
        the garbage collector warns of its socket, and the warning fails the test)."""
        for writer in self._writers:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)
