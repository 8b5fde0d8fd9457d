"""The simulator in a child process, for measurements that the test process's own GIL
would distort (a client and a server sharing one interpreter queue behind each other)."""

from __future__ import annotations

import multiprocessing
from multiprocessing.connection import Connection
from typing import Any

from tritonwatch.sim.models import ModelSet

_START_TIMEOUT_S = 30.0
_CALL_TIMEOUT_S = 30.0


def _serve(connection: Connection, kwargs: dict[str, Any]) -> None:
    from tritonwatch.sim.server import Simulator

    with Simulator(**kwargs) as sim:
        connection.send((sim.http_url, sim.grpc_url, sim.metrics_url))
        while True:
            method, args, fields = connection.recv()
            if method == "stop":
                break
            try:
                connection.send(("ok", getattr(sim, method)(*args, **fields)))
            except Exception as error:  # the test sees the simulator's error, not an EOF
                connection.send(("error", f"{type(error).__name__}: {error}"))


class SimProcess:
    """``Simulator(**kwargs)`` in a spawned process; methods are forwarded over a pipe."""

    def __init__(self, models: ModelSet | None = None, **kwargs: Any) -> None:
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(child, {"models": models, **kwargs}), daemon=True
        )
        self._process.start()
        if not self._connection.poll(_START_TIMEOUT_S):
            self._process.kill()
            raise AssertionError("the simulator process did not start")
        self.http_url, self.grpc_url, self.metrics_url = self._connection.recv()

    def _call(self, method: str, *args: Any, **fields: Any) -> Any:
        self._connection.send((method, args, fields))
        if not self._connection.poll(_CALL_TIMEOUT_S):
            raise AssertionError(f"the simulator process did not answer {method}")
        status, result = self._connection.recv()
        if status == "error":
            raise AssertionError(f"the simulator process failed {method}: {result}")
        return result

    def latency_samples(self, model: str) -> list[float]:
        result: list[float] = self._call("latency_samples", model)
        return result

    def inject_fault(self, **fields: Any) -> None:
        self._call("inject_fault", **fields)

    def clear_faults(self) -> None:
        self._call("clear_faults")

    def set_scenario(self, name: str, model: str | None = None) -> None:
        self._call("set_scenario", name, model)

    def kill(self) -> None:
        """SIGKILL, as a crashed server dies: no goodbye, connections reset by the kernel."""
        self._process.kill()
        self._process.join()

    def stop(self) -> None:
        if self._process.is_alive():
            self._connection.send(("stop", (), {}))
            self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._connection.close()

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
