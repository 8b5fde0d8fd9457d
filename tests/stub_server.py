"""A scriptable loopback HTTP server for the scrape tests: statuses, bodies, stalls."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Route:
    """What one path answers. ``stall`` holds the answer until the server closes;
    ``chunks`` are sent ``gap_s`` apart (a trickling body); ``length`` says whether a
    Content-Length header is sent (without one, the body ends when the connection does)."""

    status: int = 200
    body: bytes = b""
    stall: bool = False
    chunks: int = 1
    gap_s: float = 0.0
    length: bool = True
    headers: dict[str, str] = field(default_factory=dict)


class StubServer:
    """Answers GETs from a table of routes; unknown paths get a bare 404."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[str] = []
        self.released = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests.append(self.path)
                route = server.routes.get(self.path, Route(404))
                if route.stall:
                    server.released.wait(10)
                    return
                self.send_response(route.status)
                if route.length:
                    self.send_header("Content-Length", str(len(route.body)))
                for name, value in route.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                step = max(1, len(route.body) // route.chunks)
                try:
                    for start in range(0, len(route.body), step):
                        if start and route.gap_s and server.released.wait(route.gap_s):
                            return
                        self.wfile.write(route.body[start : start + step])
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    return  # the client gave up, as it should have

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self.released.set()
        self._server.shutdown()
        self._server.server_close()
