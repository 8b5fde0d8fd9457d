"""Shared by the LLM simulator tests: a model set with LLM models, raw HTTP, SSE parsing."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tritonwatch.sim.models import ModelSet, parse_model_set

SOCKET_TIMEOUT_S = 10.0
FAST = {"prefill_per_token": "5us", "decode_step_base": "1ms", "decode_step_per_seq": "20us"}
"""Cheap steps: tests count tokens and framing, never time them."""


def llm_model_set(**llm_by_model: dict[str, Any]) -> ModelSet:
    """A TensorRT-LLM-like ``trt``, a vLLM ``vl``, a flag-only-final ``pyllm`` and the
    plain ``text`` model, each LLM with the cheap costs plus ``llm_by_model`` changes."""
    llms = {
        "trt": {"backend": "tensorrt_llm"},
        "vl": {"backend": "vllm"},
        "pyllm": {"backend": "tensorrt_llm", "final_flag_only": True},
    }
    models: list[dict[str, Any]] = [
        {"name": name, "max_batch_size": 0, "llm": {**FAST, **llm, **llm_by_model.get(name, {})}}
        for name, llm in llms.items()
    ]
    models.append(
        {
            "name": "text",
            "max_batch_size": 0,
            "input": [{"name": "INPUT0", "data_type": "TYPE_STRING", "dims": [1]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_STRING", "dims": [1]}],
            "compute": "identity",
        }
    )
    return parse_model_set(
        {"gpus": [{"uuid": "GPU-11111111-0000-4000-8000-000000000000"}], "models": models}
    )


@dataclass
class RawAnswer:
    """An HTTP/1.1 answer read off the socket: status, headers, and the body's chunks."""

    status: int
    headers: dict[str, str]
    chunks: list[bytes]
    """The chunked body's chunks in order (the terminal zero chunk excluded)."""

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)


def post_raw(base_url: str, path: str, document: Any) -> RawAnswer:
    """POSTs JSON with a hand-written HTTP/1.1 request and reads the whole answer."""
    address = urlsplit(base_url)
    body = json.dumps(document).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {address.hostname}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(
        (address.hostname, address.port or 80), timeout=SOCKET_TIMEOUT_S
    ) as sock:
        sock.sendall(head + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head_bytes, _, rest = data.partition(b"\r\n\r\n")
    lines = head_bytes.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {
        key.strip().lower(): value.strip()
        for key, _, value in (line.partition(":") for line in lines[1:])
    }
    if headers.get("transfer-encoding") != "chunked":
        return RawAnswer(status, headers, [rest])
    chunks = []
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            assert rest == b"\r\n", f"bytes after the terminal chunk: {rest!r}"
            return RawAnswer(status, headers, chunks)
        chunks.append(rest[:size])
        assert rest[size : size + 2] == b"\r\n"
        rest = rest[size + 2 :]


def sse_data(body: bytes) -> list[str]:
    """The ``data:`` payloads of an event stream, in order (every event ends ``\\n\\n``)."""
    assert body.endswith(b"\n\n") or body == b"", body[-40:]
    events = body.decode().split("\n\n")[:-1]
    payloads = []
    for event in events:
        assert event.startswith("data: "), event
        payloads.append(event.removeprefix("data: "))
    return payloads
