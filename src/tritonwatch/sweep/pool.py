"""Load workers in this process or in child processes, behind one small interface.

One Python process drives a few thousand requests per second; past that the load
generator, not the server, would flatten a sweep's curve. :func:`start_workers`
splits the concurrency over ``processes`` workers; the coordinator then calls
:meth:`~tritonwatch.sweep.worker.Worker.cut` on each at every window boundary and
merges the samples exactly.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from collections.abc import Sequence
from dataclasses import replace
from multiprocessing.connection import Connection

from tritonwatch.sweep.spec import LoadSpec
from tritonwatch.sweep.worker import LoadWorker, WindowSamples, Worker

COMMAND_TIMEOUT_SECONDS = 30.0


class LocalWorker:
    """A :class:`LoadWorker` on its own event loop thread in this process."""

    def __init__(self, spec: LoadSpec) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="load", daemon=True)
        self._thread.start()
        self._worker = LoadWorker(spec)
        asyncio.run_coroutine_threadsafe(self._worker.start(), self._loop).result(
            COMMAND_TIMEOUT_SECONDS
        )

    def cut(self) -> WindowSamples:
        async def cut() -> WindowSamples:
            return self._worker.cut()

        return asyncio.run_coroutine_threadsafe(cut(), self._loop).result(COMMAND_TIMEOUT_SECONDS)

    def stop(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self._worker.stop(), self._loop).result(
                COMMAND_TIMEOUT_SECONDS
            )
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=COMMAND_TIMEOUT_SECONDS)
            if not self._thread.is_alive():
                self._loop.close()


def _child_main(spec: LoadSpec, connection: Connection) -> None:
    """A child process: run the worker, answer "cut" and "stop" from the pipe."""

    async def main() -> None:
        worker = LoadWorker(spec)
        await worker.start()
        done = asyncio.get_running_loop().create_future()

        def on_command() -> None:
            command = connection.recv()
            if command == "cut":
                connection.send(worker.cut())
            elif not done.done():
                done.set_result(None)

        asyncio.get_running_loop().add_reader(connection.fileno(), on_command)
        connection.send("ready")
        await done
        await worker.stop()
        connection.send("stopped")

    asyncio.run(main())


class ProcessWorker:
    """A :class:`LoadWorker` in a child process (spawned: no state inherited)."""

    def __init__(self, spec: LoadSpec) -> None:
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self._process = context.Process(target=_child_main, args=(spec, child), daemon=True)
        self._process.start()
        self._expect("ready")

    def _expect(self, what: str) -> object:
        if not self._connection.poll(COMMAND_TIMEOUT_SECONDS):
            raise TimeoutError(f"load worker process did not answer ({what})")
        return self._connection.recv()

    def cut(self) -> WindowSamples:
        self._connection.send("cut")
        result = self._expect("cut")
        assert isinstance(result, WindowSamples)
        return result

    def stop(self) -> None:
        try:
            if self._process.is_alive():
                self._connection.send("stop")
                self._expect("stop")
        except (OSError, EOFError, TimeoutError):
            pass  # a dead worker has nothing left to stop
        finally:
            self._process.join(timeout=5)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
            self._connection.close()


def split_concurrency(total: int, processes: int) -> list[int]:
    """``total`` in-flight requests over at most ``processes`` workers, as evenly as possible."""
    processes = max(1, min(processes, total))
    return [total // processes + (1 if i < total % processes else 0) for i in range(processes)]


def start_workers(spec: LoadSpec, processes: int) -> list[Worker]:
    """Workers that together keep ``spec.concurrency`` requests in flight (or send
    ``spec.rate`` per second); one process runs in this process, more are spawned."""
    shares = split_concurrency(spec.concurrency, processes)
    specs = [
        replace(spec, concurrency=share, rate=spec.rate * share / spec.concurrency)
        for share in shares
    ]
    if len(specs) == 1:
        return [LocalWorker(specs[0])]
    workers: list[Worker] = []
    try:
        for worker_spec in specs:
            workers.append(ProcessWorker(worker_spec))
    except Exception:
        stop_workers(workers)
        raise
    return workers


def cut_all(workers: Sequence[Worker]) -> WindowSamples:
    """Closes the window on every worker and merges the samples."""
    merged: WindowSamples | None = None
    for worker in workers:
        window = worker.cut()
        merged = window if merged is None else merged.merge(window)
    assert merged is not None
    return merged


def stop_workers(workers: Sequence[Worker]) -> None:
    for worker in workers:
        worker.stop()
