"""The runner's streaming canaries against a loopback KServe/OpenAI server (no Triton):
which canary streams, when its sender is chosen, and the stream series it declares.

Every model gets one :class:`ModelCanary` for its whole run: its sender is chosen once,
when it is prepared (a plain model's UnarySender, a decoupled model's StreamSender, or
a StreamSender at once for ``stream.mode: on`` and protocol openai), and the runner
never swaps the canary for another. The same against real Triton's decoupled model:
tests/probe/test_stream_canary_real.py.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from engine_support import RawServer, read_request
from stream_real_support import RecordingStreamBoard
from stream_script_support import END, HEAD_200, chunk, event

from support import wait_until
from tritonwatch.config.canary_schema import StreamConfig
from tritonwatch.probe import runner as canary_runner
from tritonwatch.probe.canary.model_canary import ModelCanary
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.canary.unary import UnarySender
from tritonwatch.probe.runner import CanaryRunner
from tritonwatch.probe.stream.stream_canary import StreamSender
from tritonwatch.state.canary_board import CanaryBoard

WAIT = 20.0
"""Real seconds a canary may take to prepare and stream (it takes milliseconds)."""
TEXT_INPUTS = {
    "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1]},
               {"name": "max_tokens", "datatype": "INT32", "shape": [1]}],
    "outputs": [{"name": "text_output", "datatype": "BYTES", "shape": [1]}],
}  # fmt: skip
PLAIN = {
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2]}],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 2]}],
}
DECOUPLED = {"model_transaction_policy": {"decoupled": True}}
MODELS = {"plain": (PLAIN, {}), "auto": (TEXT_INPUTS, DECOUPLED), "on": (TEXT_INPUTS, {})}
"""Model → (metadata, config) the server answers."""
CHAT = chunk(b'data: {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}\n\n')


def _answer(body: bytes, status: str = "200 OK") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
    return f"{head}\r\n\r\n".encode() + body


class KServe:
    """Answers the model APIs from :data:`MODELS`, each infer with ``y``, each
    generate_stream with one token and each chat completion with one chunk; counts
    what it was asked, by method and path."""

    def __init__(self) -> None:
        self.asked: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._raw = RawServer(self._serve)
        self.url = f"http://127.0.0.1:{self._raw.port}"

    def _serve(self, conn: socket.socket, _server: RawServer) -> None:
        buffer = bytearray()
        while (request := read_request(conn, buffer)) is not None:
            method, path, _ = request.split(b"\r\n", 1)[0].decode().split(" ", 2)
            with self._lock:
                self.asked[f"{method} {path}"] += 1
            conn.sendall(self._reply(path))

    def _reply(self, path: str) -> bytes:
        parts = path.removeprefix("/v2/models/").split("/")
        if path == "/v2":
            return _answer(json.dumps({"extensions": []}).encode())
        if path == "/v1/chat/completions":
            return HEAD_200 + CHAT + chunk(b"data: [DONE]\n\n") + END
        if parts[0] not in MODELS:
            return _answer(b'{"error": "unknown model"}', "404 Not Found")
        metadata, config = MODELS[parts[0]]
        match parts[1:]:
            case []:
                return _answer(json.dumps({"name": parts[0], **metadata}).encode())
            case ["config"]:
                return _answer(json.dumps({"name": parts[0], **config}).encode())
            case ["generate_stream"]:
                return HEAD_200 + event("t") + END
            case _:  # infer
                outputs = [{"name": "y", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]
                return _answer(json.dumps({"model_name": parts[0], "outputs": outputs}).encode())

    def count(self, method: str, path: str) -> int:
        with self._lock:
            return self.asked[f"{method} {path}"]

    def close(self) -> None:
        self._raw.close()


@pytest.fixture
def kserve() -> Iterator[KServe]:
    server = KServe()
    yield server
    server.close()


def _plans(url: str) -> list[CanaryPlan]:
    base = CanaryPlan(
        target="t", model="plain", version="", protocol="http", http_url=url,
        grpc_url="grpc://127.0.0.1:1", rate=20.0, poisson=False, timeout=2.0,
        max_in_flight=1, data="zero", stream=StreamConfig(max_tokens=1, prompt="hi"),
    )  # fmt: skip
    return [
        base,
        replace(base, model="auto"),
        replace(base, model="on", stream=StreamConfig(mode="on", max_tokens=1, prompt="hi")),
        replace(base, model="chat", protocol="openai", openai_url=f"{url}/v1"),
    ]


def test_each_canary_chooses_its_sender_once_and_runs_on_without_a_swap(
    kserve: KServe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Breaks if the runner swaps a canary for another when its model turns out to be
    decoupled (the one it started must run on), if a canary's sender is chosen other
    than once at prepare (a plain one for a decoupled model, a streaming one made again,
    the model's metadata and config asked twice), if ``stream.mode: on`` (on a model
    whose config does not say decoupled) or protocol openai get the plain sender (KServe
    infers) or do not stream, if openai asks the KServe API anything, or if a streaming
    series is not declared on the stream board (``on`` and ``chat`` at apply, ``auto``
    once its config said decoupled; ``plain`` never)."""
    made: Counter[str] = Counter()
    factory = canary_runner.stream_senders

    def counting(*args: Any) -> Any:
        make = factory(*args)

        async def counted(plan: CanaryPlan, *rest: Any) -> Any:
            made[plan.model] += 1
            return await make(plan, *rest)

        return counted

    monkeypatch.setattr(canary_runner, "stream_senders", counting)
    stats, streams = CanaryBoard(), RecordingStreamBoard()
    runner = CanaryRunner(stats, streams)
    try:
        runner.start(_plans(kserve.url))
        at_apply = {snap.model for snap in streams.snapshot(time.monotonic())}
        started = {key[1]: canary for key, canary in runner.running().items()}
        senders = wait_until(lambda: _senders(started) or stats.skipped(), WAIT, "every sender")
        assert stats.skipped() == {}, stats.skipped()
        assert {m: type(s).__name__ for m, s in senders.items()} == {
            "plain": "UnarySender", "auto": "StreamSender", "on": "StreamSender",
            "chat": "StreamSender"}  # fmt: skip

        def streamed_twice() -> bool:
            models = Counter(r.model for r in streams.results)
            return all(models[m] >= 2 for m in ("auto", "on", "chat"))

        wait_until(streamed_twice, WAIT, "two streams of each streaming canary")
        running = {key[1]: canary for key, canary in runner.running().items()}
        declared = {snap.model for snap in streams.snapshot(time.monotonic())}
    finally:
        runner.stop()
    assert {"on", "chat"} <= at_apply and "plain" not in at_apply
    assert declared == {"auto", "on", "chat"}
    assert all(running[m] is started[m] for m in started) and set(running) == set(started)
    assert all(running[m].sender is senders[m] for m in senders)  # chosen once
    assert made == {"auto": 1, "on": 1, "chat": 1}
    assert {r.outcome.value for r in streams.results} == {"success"}, streams.results
    for model in ("plain", "auto"):
        asked = (kserve.count("GET", f"/v2/models/{model}"),
                 kserve.count("GET", f"/v2/models/{model}/config"))  # fmt: skip
        assert asked == (1, 1), model
    for model in ("auto", "on"):  # a streaming canary never sends a plain infer
        assert kserve.count("POST", f"/v2/models/{model}/infer") == 0, model
        assert kserve.count("POST", f"/v2/models/{model}/generate_stream") >= 2, model
    assert [asked for asked in kserve.asked if "/v2/models/chat" in asked] == []
    assert kserve.count("POST", "/v1/chat/completions") >= 2


def _senders(canaries: dict[str, ModelCanary]) -> dict[str, UnarySender | StreamSender] | None:
    """Every canary's sender, once each has one."""
    chosen = {model: canary.sender for model, canary in canaries.items()}
    if any(sender is None for sender in chosen.values()):
        return None
    return {m: s for m, s in chosen.items() if isinstance(s, UnarySender | StreamSender)}
