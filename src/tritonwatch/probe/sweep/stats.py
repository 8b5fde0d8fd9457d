"""Server-side timing for one sweep step, from Triton's statistics API.

perf_analyzer reads ``v2/models/{m}/stats`` before and after each measurement and
divides the cumulative nanosecond counters by the requests in between; so do we.
The difference between the client's mean latency and the server's request time is
what the network, serialisation and the client itself cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tritonwatch.common.client_tls import ClientTLS
from tritonwatch.probe.canary.clients import sync_client
from tritonwatch.records.sweep_records import SERVER_STAGES, ServerBreakdown


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    """Cumulative counters of one model (nanoseconds and counts)."""

    success_count: int
    success_ns: int
    stage_ns: dict[str, int]
    inference_count: int
    execution_count: int


def _int(entry: Mapping[str, Any], *names: str) -> int:
    for name in names:
        if name in entry:
            return int(entry[name])  # gRPC's JSON writes int64 as strings
    return 0


def parse_stats(response: Mapping[str, Any], version: str = "") -> StatsSnapshot | None:
    """Reads the HTTP (snake_case) or gRPC-JSON (camelCase) statistics response."""
    for model in response.get("model_stats", response.get("modelStats", [])):
        if version and str(model.get("version", "")) != version:
            continue
        inference = model.get("inference_stats", model.get("inferenceStats", {}))
        stage_ns = {
            stage: _int(inference.get(stage, inference.get(_camel(stage), {})), "ns")
            for stage in SERVER_STAGES
        }
        success = inference.get("success", {})
        return StatsSnapshot(
            _int(success, "count"),
            _int(success, "ns"),
            stage_ns,
            _int(model, "inference_count", "inferenceCount"),
            _int(model, "execution_count", "executionCount"),
        )
    return None


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def breakdown(before: StatsSnapshot, after: StatsSnapshot) -> ServerBreakdown | None:
    """Averages between two snapshots; None when no request succeeded in between or
    the counters went backwards (a server restart mid-step)."""
    requests = after.success_count - before.success_count
    if requests <= 0:
        return None
    stage = {s: (after.stage_ns[s] - before.stage_ns[s]) / requests / 1e9 for s in SERVER_STAGES}
    if min(stage.values()) < 0:
        return None
    executions = after.execution_count - before.execution_count
    inferences = after.inference_count - before.inference_count
    return ServerBreakdown(
        requests,
        (after.success_ns - before.success_ns) / requests / 1e9,
        stage,
        inferences / executions if executions > 0 else None,
    )


class StatsReader:
    """Fetches one model's statistics over the sweep's protocol (None if unsupported)."""

    def __init__(
        self, protocol: str, url: str, model: str, version: str, tls: ClientTLS | None = None
    ) -> None:
        self._model, self._version = model, version
        self._client: Any = sync_client(protocol, url, tls)
        self._grpc = protocol == "grpc"
        self.available = True

    def snapshot(self) -> StatsSnapshot | None:
        # The client (tritonclient's) imported it already; the sweep's module does not.
        from tritonclient.utils import InferenceServerException  # noqa: PLC0415

        if not self.available:
            return None
        try:
            if self._grpc:
                response = self._client.get_inference_statistics(
                    self._model, self._version, as_json=True
                )
            else:
                response = self._client.get_inference_statistics(self._model, self._version)
        except InferenceServerException:
            self.available = False  # a KServe server without Triton's statistics extension
            return None
        return parse_stats(response, self._version)

    def close(self) -> None:
        self._client.close()
