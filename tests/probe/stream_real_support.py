"""What the real-Triton streaming canary tests share: the model, the plan, a recorder."""

from __future__ import annotations

from real_triton import RealTriton
from tritonwatch.config.canary_schema import StreamConfig
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.records.observations import StreamResult
from tritonwatch.state.stream_board import StreamBoard

MODEL = "llm_stream"
MAX_TOKENS = 6
RATE = 12.0
"""Streams a second: about 20 + 5 × 2 ms of model time each, so one ends well before the
next starts even on a loaded host."""


class RecordingStreamBoard(StreamBoard):
    """StreamBoard that also keeps every result, so the test reads exact values."""

    def __init__(self) -> None:
        super().__init__()
        self.results: list[StreamResult] = []

    def record(self, result: StreamResult) -> None:
        self.results.append(result)
        super().record(result)


def stream_plan(server: RealTriton, protocol: str) -> CanaryPlan:
    return CanaryPlan(
        target="real", model=MODEL, version="", protocol=protocol,
        http_url=server.http_url, grpc_url=server.grpc_url, rate=RATE, poisson=False,
        timeout=5.0, max_in_flight=1, data="random",
        stream=StreamConfig(max_tokens=MAX_TOKENS, prompt="hello there", timeout=10.0),
    )  # fmt: skip
