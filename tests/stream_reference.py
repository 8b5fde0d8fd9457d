"""Minimal independent streaming clients, the yardstick the streaming canary is held to.

Nothing of tritonwatch is used here: the HTTP reference writes its generate_stream
request by hand on a blocking socket and stamps ``time.perf_counter()`` at each read that
completes an event (``\\n\\n``); the gRPC one is tritonclient's own sync stream with the
empty final response asked for. Both time a request from just before it is written to
its first content event (TTFT) and between content events (ITL), the definitions of
docs/design.md §5, so a disagreement with the canary is the canary's.
"""

from __future__ import annotations

import itertools
import json
import queue
import socket
import time
from dataclasses import dataclass
from typing import Any

TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Measured:
    """One streamed request as the reference saw it."""

    ttft: float
    gaps: tuple[float, ...]
    tokens: int


def _timed(sent: float, stamps: list[float]) -> Measured:
    gaps = tuple(b - a for a, b in itertools.pairwise(stamps))
    return Measured(stamps[0] - sent, gaps, len(stamps))


class HttpReference:
    """generate_stream over one keep-alive connection, read off a blocking socket."""

    def __init__(self, port: int, model: str) -> None:
        self._port, self._model = port, model
        self._sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def stream(self, prompt: str, max_tokens: int) -> Measured:
        body = json.dumps({"text_input": prompt, "max_tokens": max_tokens, "stream": True})
        request = (
            f"POST /v2/models/{self._model}/generate_stream HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{self._port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}"
        ).encode()
        stamps: list[float] = []
        raw = bytearray()
        seen = 0
        deadline = time.monotonic() + TIMEOUT_S
        sent = time.perf_counter()
        self._sock.sendall(request)
        while not raw.endswith(b"\r\n0\r\n\r\n"):
            read = self._sock.recv(65536)
            now = time.perf_counter()
            assert read and time.monotonic() < deadline, "the stream did not end"
            raw += read
            while (end := raw.find(b"\n\n", seen)) >= 0:
                event = raw[raw.rfind(b"data: ", 0, end) + 6 : end]
                if json.loads(event).get("text_output"):
                    stamps.append(now)
                seen = end + 2
        assert raw.startswith(b"HTTP/1.1 200"), bytes(raw[:200])
        return _timed(sent, stamps)

    def close(self) -> None:
        self._sock.close()


class GrpcReference:
    """tritonclient's sync ``start_stream``/``async_stream_infer`` on one stream."""

    def __init__(self, address: str, model: str) -> None:
        import tritonclient.grpc as grpcclient

        self._grpc = grpcclient
        self._model = model
        self._client = grpcclient.InferenceServerClient(address)
        self._responses: queue.Queue[tuple[float, Any, Any]] = queue.Queue()
        self._client.start_stream(
            callback=lambda result, error: self._responses.put((time.perf_counter(), result, error))
        )
        self._sent = 0

    def stream(self, prompt: str, max_tokens: int) -> Measured:
        import numpy as np

        grpcclient = self._grpc
        text = grpcclient.InferInput("text_input", [1], "BYTES")
        text.set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
        count = grpcclient.InferInput("max_tokens", [1], "INT32")
        count.set_data_from_numpy(np.array([max_tokens], dtype=np.int32))
        self._sent += 1
        request_id = f"ref-{self._sent}"
        stamps: list[float] = []
        sent = time.perf_counter()
        self._client.async_stream_infer(
            self._model, [text, count], request_id=request_id, enable_empty_final_response=True
        )
        while True:
            stamp, result, error = self._responses.get(timeout=TIMEOUT_S)
            assert error is None, error
            response = result.get_response()
            if response.id != request_id:
                continue
            output = result.as_numpy("text_output")
            if output is not None and output.size and output.reshape(-1)[0]:
                stamps.append(stamp)
            if response.parameters["triton_final_response"].bool_param:
                return _timed(sent, stamps)

    def close(self) -> None:
        self._client.stop_stream()
        self._client.close()
