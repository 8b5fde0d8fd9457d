"""Minimal independent streaming clients, the yardstick the streaming canary is held to.

Nothing of tritonwatch is used here: the HTTP reference writes its generate_stream
request by hand on a blocking socket and stamps ``time.perf_counter()`` at each read that
completes an event (``\\n\\n``); the gRPC one writes ``ModelStreamInfer``'s HTTP/2 frames
by hand the same way (messages by tritonclient's ``service_pb2``), the empty final
response asked for. Both time a request from just before it is written to
its first content event (TTFT) and between content events (ITL), the definitions of
docs/design.md §5, so a disagreement with the canary is the canary's.
"""

from __future__ import annotations

import itertools
import json
import socket
import struct
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
    """``ModelStreamInfer`` spoken by hand: HTTP/2 frames on a blocking socket (``hpack``
    for the header blocks, tritonclient's ``service_pb2`` for the messages), one call per
    request on one connection, ``time.perf_counter()`` stamped at each read that completes
    a content message.

    Not tritonclient's own stream: its answers cross from gRPC's poller thread to a
    callback and a queue, which on a loaded host put 1.4-1.9 ms into its TTFT that the
    server never spent; the yardstick must time the wire, as the HTTP one does."""

    def __init__(self, address: str, model: str) -> None:
        import hpack

        host, _, port = address.rpartition(":")
        self._model = model
        self._authority = address
        self._encoder, self._decoder = hpack.Encoder(), hpack.Decoder()
        self._sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = bytearray()
        self._stream_id = -1
        window = 2**31 - 1 - 65_535
        settings = struct.pack(">HI", 0x4, 2**31 - 1)  # INITIAL_WINDOW_SIZE: the largest
        self._sock.sendall(
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
            + _frame(0x4, 0, 0, settings)
            + _frame(0x8, 0, 0, struct.pack(">I", window))  # the connection's window too
        )

    def stream(self, prompt: str, max_tokens: int) -> Measured:
        from tritonclient.grpc import service_pb2

        self._stream_id += 2
        stream = self._stream_id
        request = service_pb2.ModelInferRequest(model_name=self._model, id=f"ref-{stream}")
        request.parameters["triton_enable_empty_final_response"].bool_param = True
        for name, datatype, raw in (
            ("text_input", "BYTES", struct.pack("<I", len(prompt)) + prompt.encode()),
            ("max_tokens", "INT32", struct.pack("<i", max_tokens)),
        ):
            tensor = request.inputs.add(name=name, datatype=datatype)
            tensor.shape.append(1)
            request.raw_input_contents.append(raw)
        message = request.SerializeToString()
        headers = self._encoder.encode([
            (":method", "POST"), (":scheme", "http"),
            (":path", "/inference.GRPCInferenceService/ModelStreamInfer"),
            (":authority", self._authority), ("content-type", "application/grpc"),
            ("te", "trailers"),
        ])  # fmt: skip
        body = struct.pack(">BI", 0, len(message)) + message
        stamps: list[float] = []
        data = bytearray()
        deadline = time.monotonic() + TIMEOUT_S
        sent = time.perf_counter()
        self._sock.sendall(_frame(0x1, 0x4, stream, headers) + _frame(0x0, 0x1, stream, body))
        while True:
            read = self._sock.recv(65536)
            now = time.perf_counter()
            assert read and time.monotonic() < deadline, "the stream did not end"
            self._buffer += read
            for kind, flags, on, payload in self._frames():
                if kind == 0x4 and not flags & 0x1:  # SETTINGS: acknowledged
                    self._sock.sendall(_frame(0x4, 0x1, 0, b""))
                elif kind == 0x6 and not flags & 0x1:  # PING: answered
                    self._sock.sendall(_frame(0x6, 0x1, 0, payload))
                elif kind == 0x3 or kind == 0x7:
                    raise AssertionError(f"the server reset the stream or went away: {payload!r}")
                elif kind == 0x1 and on == stream:
                    fields = dict(self._decoder.decode(payload))
                    status = fields.get("grpc-status")
                    if flags & 0x1:  # the trailers: the call is over
                        assert status in (None, "0"), fields
                        return _timed(sent, stamps)
                elif kind == 0x0 and on == stream:
                    data += payload
                    while len(data) >= 5 and len(data) >= 5 + int.from_bytes(data[1:5], "big"):
                        size = int.from_bytes(data[1:5], "big")
                        answer = service_pb2.ModelStreamInferResponse.FromString(
                            bytes(data[5 : 5 + size])
                        )
                        del data[: 5 + size]
                        assert not answer.error_message, answer.error_message
                        if _token(answer.infer_response):
                            stamps.append(now)

    def _frames(self) -> list[tuple[int, int, int, bytes]]:
        """The whole frames read so far, taken out of the buffer."""
        frames = []
        while len(self._buffer) >= 9:
            length = int.from_bytes(self._buffer[:3], "big")
            if len(self._buffer) < 9 + length:
                break
            kind, flags = self._buffer[3], self._buffer[4]
            stream = int.from_bytes(self._buffer[5:9], "big") & 0x7FFFFFFF
            frames.append((kind, flags, stream, bytes(self._buffer[9 : 9 + length])))
            del self._buffer[: 9 + length]
        return frames

    def close(self) -> None:
        self._sock.close()


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    """One HTTP/2 frame (RFC 9113 §4.1)."""
    return (
        len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload
    )


def _token(response: Any) -> bool:
    """Whether a ``ModelInferResponse`` carries a token: a non-empty ``text_output``
    element (a BYTES tensor's raw contents are a 4-byte length, then the bytes)."""
    names = [output.name for output in response.outputs]
    if "text_output" not in names:
        return False  # the empty final response
    raw: bytes = response.raw_output_contents[names.index("text_output")]
    return len(raw) > 4 and int.from_bytes(raw[:4], "little") > 0
