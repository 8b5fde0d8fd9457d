"""Concurrent generate_stream load from a process of its own, as other clients' streams
reach a server: the test process (and an in-process daemon) keep their GIL to themselves.

Each of ``concurrency`` threads posts one stream after another over a keep-alive HTTP/1.1
connection and reads it to the end, until the load is stopped. Each stream asks for a
number of tokens drawn from a range (seeded per thread), so streams end at different
steps instead of in waves. A load generator, not a measurement: it counts streams and
failures, never times them.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import multiprocessing.connection
import random
import threading
from multiprocessing.synchronize import Event
from types import TracebackType
from urllib.parse import urlsplit

REQUEST_TIMEOUT_S = 60.0
"""A whole stream, queueing included, on a loaded host."""
STOP_TIMEOUT_S = 30.0


def _stream_forever(
    url: str,
    model: str,
    prompt: str,
    tokens: tuple[int, int],
    seed: int,
    stop: Event,
    counts: list[int],
) -> None:
    """Streams until ``stop``; ``counts`` is [streams read to the end, failures]."""
    address = urlsplit(url)
    draw = random.Random(seed)
    path = f"/v2/models/{model}/generate_stream"
    headers = {"Content-Type": "application/json"}
    connection: http.client.HTTPConnection | None = None
    while not stop.is_set():
        try:
            if connection is None:
                connection = http.client.HTTPConnection(
                    address.hostname or "127.0.0.1", address.port, timeout=REQUEST_TIMEOUT_S
                )
            document = {"text_input": prompt, "max_tokens": draw.randint(*tokens), "stream": True}
            connection.request("POST", path, json.dumps(document).encode(), headers)
            answer = connection.getresponse()
            text = answer.read()
            ok = answer.status == 200 and b'"error"' not in text
            counts[0 if ok else 1] += 1
        except (OSError, http.client.HTTPException):
            counts[1] += 1
            if connection is not None:
                connection.close()
            connection = None
            stop.wait(0.1)


def _run(
    url: str,
    model: str,
    concurrency: int,
    prompt_words: int,
    tokens: tuple[int, int],
    stop: Event,
    done: multiprocessing.connection.Connection,
) -> None:
    prompt = " ".join(f"w{index}" for index in range(prompt_words))
    counts = [[0, 0] for _ in range(concurrency)]
    threads = [
        threading.Thread(
            target=_stream_forever,
            args=(url, model, prompt, tokens, seed, stop, counts[seed]),
            daemon=True,
        )
        for seed in range(concurrency)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(REQUEST_TIMEOUT_S + STOP_TIMEOUT_S)
    done.send((sum(c[0] for c in counts), sum(c[1] for c in counts)))


class StreamLoad:
    """``concurrency`` closed-loop streams of ``prompt_words`` words and ``tokens`` (low,
    high) tokens each against ``model``, from a spawned process, while the block lasts."""

    def __init__(
        self,
        url: str,
        model: str,
        *,
        concurrency: int,
        prompt_words: int,
        tokens: tuple[int, int],
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._result, child = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_run,
            args=(url, model, concurrency, prompt_words, tokens, self._stop, child),
            daemon=True,
        )
        self.streams = 0
        """Streams read to their end without an error (known once stopped)."""
        self.failures = 0

    def __enter__(self) -> StreamLoad:
        self._process.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._result.poll(REQUEST_TIMEOUT_S + STOP_TIMEOUT_S):
            self.streams, self.failures = self._result.recv()
        self._process.join(STOP_TIMEOUT_S)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(STOP_TIMEOUT_S)
