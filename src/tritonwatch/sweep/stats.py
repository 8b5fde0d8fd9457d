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
from tritonwatch.records.sweep_records import SERVER_STAGES, ServerBreakdown
from tritonwatch.triton_api.client import ModelApiClient
from tritonwatch.triton_api.endpoint import protocol_endpoint

STATS_TIMEOUT_SECONDS = 10.0
"""How long one statistics read may take (between a step's measurements)."""


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    """Cumulative counters of one model (nanoseconds and counts)."""

    success_count: int
    success_ns: int
    stage_ns: dict[str, int]
    inference_count: int
    execution_count: int


def _int(entry: Mapping[str, Any], name: str) -> int:
    return int(entry.get(name, 0))


def parse_stats(response: Mapping[str, Any], version: str = "") -> StatsSnapshot | None:
    """Reads a statistics answer in the HTTP API's shape (the model API client's, over
    either protocol): the first entry of ``version`` (any version when ``""``)."""
    for model in response.get("model_stats", []):
        if version and str(model.get("version", "")) != version:
            continue
        inference = model.get("inference_stats", {})
        stage_ns = {stage: _int(inference.get(stage, {}), "ns") for stage in SERVER_STAGES}
        success = inference.get("success", {})
        return StatsSnapshot(
            _int(success, "count"),
            _int(success, "ns"),
            stage_ns,
            _int(model, "inference_count"),
            _int(model, "execution_count"),
        )
    return None


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
    """Reads one model's statistics over the sweep's protocol (:mod:`tritonwatch.triton_api`).

    A server without the statistics API (a KServe server that is not Triton) turns the
    reader off (``available`` False: every snapshot is None); a failed read is None for
    that snapshot only.
    """

    def __init__(
        self, protocol: str, url: str, model: str, version: str, tls: ClientTLS | None = None
    ) -> None:
        self._model, self._version = model, version
        endpoint = protocol_endpoint(protocol, url, tls)
        self._client = ModelApiClient(endpoint, timeout=STATS_TIMEOUT_SECONDS)
        self.available = True

    def snapshot(self) -> StatsSnapshot | None:
        if not self.available:
            return None
        answer = self._client.statistics(self._model, self._version)
        if answer.missing_api is not None:
            self.available = False
            return None
        return parse_stats(answer.document, self._version) if answer.ok else None

    def close(self) -> None:
        self._client.close()
