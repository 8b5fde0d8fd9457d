"""The scale benchmark's many-model server (benchmarks/many_models.py) in this process,
on loopback ports, with what the call-budget tests change on it: a model's version, its
statistics started over (a reload), a model gone from the statistics for a while, and
each config and metadata call counted per model as well as per kind."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from many_models import (
    Answer,
    ManyModels,
    ModelCounters,
    Request,
    RequestError,
    serve,
)


class ChangingModels(ManyModels):
    """:class:`ManyModels` whose models can be reloaded as the tests need."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.versions: dict[str, str] = {}
        """Model → its version, where not "1"."""
        self.hidden: set[str] = set()
        """Models the statistics leave out (unloaded for a while)."""
        self.per_model: Counter[tuple[str, str]] = Counter()
        """(kind, model) → calls, for config and metadata."""
        self.server_answer: Answer | None = None
        """What ``GET /v2`` answers instead of the server metadata (a failure)."""
        for kind in ("config", "metadata"):
            self._handlers[kind] = self._counted(kind, self._handlers[kind])
        server = self._handlers["server"]
        self._handlers["server"] = lambda r, m: self.server_answer or server(r, m)

    def _counted(self, kind: str, handler: Any) -> Any:
        def counted(request: Request, model: str) -> Answer:
            self.per_model[(kind, model)] += 1
            answer: Answer = handler(request, model)
            return answer

        return counted

    def calls_of(self, kind: str) -> dict[str, int]:
        """Model → calls of ``kind`` (config or metadata) so far; models never asked left out."""
        return {model: n for (each, model), n in self.per_model.items() if each == kind}

    def reset_calls(self) -> None:
        self.per_model.clear()
        for kind in self.calls:
            self.calls[kind] = 0

    def reload(self, name: str) -> None:
        """The model loaded again as the same version: its statistics and counters from 0."""
        self.counters[name] = ModelCounters()

    def serve_some(self, name: str, requests: int = 3) -> None:
        """``requests`` inferences of one row counted for ``name``."""
        for _ in range(requests):
            self.counters[name].record(1, 2000)

    def stats_document(self, names: list[str] | None = None) -> dict[str, Any]:
        chosen = [n for n in (self.names if names is None else names) if n not in self.hidden]
        if names is not None and not chosen:
            raise RequestError(400, f"requested model '{names[0]}' is not available")
        document = super().stats_document(chosen)
        for entry in document["model_stats"]:
            entry["version"] = self.versions.get(entry["name"], "1")
        return document

    def index(self) -> list[dict[str, str]]:
        return [
            {"name": name, "version": self.versions.get(name, "1"), "state": "READY"}
            for name in self.names
        ]


@contextmanager
def serving(models: ManyModels, tmp_path: Path) -> Iterator[dict[str, int]]:
    """``models`` on loopback ports (``{"http": P, "metrics": Q}``), on a thread of its own."""
    loop = asyncio.new_event_loop()
    ports_file = tmp_path / "ports.json"
    task = loop.create_task(serve(models, ports_file))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        for _ in range(500):
            if ports_file.exists():
                break
            threading.Event().wait(0.01)
        yield json.loads(ports_file.read_text())
    finally:

        async def stop() -> None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
