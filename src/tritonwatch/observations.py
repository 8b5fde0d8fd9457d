"""The immutable records every source emits (DESIGN §1).

Sources only observe; judgement happens later in pure functions over these
records. Timestamps are monotonic seconds (``time.monotonic``) so that wall-clock
jumps never distort rates or windows.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Outcome(StrEnum):
    """How one request to a server ended; exported as the ``outcome`` label."""

    SUCCESS = "success"
    TIMEOUT = "timeout"
    HTTP_ERROR = "http_error"
    GRPC_ERROR = "grpc_error"
    CONNECTION_ERROR = "connection_error"
    BAD_RESPONSE = "bad_response"


@dataclass(frozen=True, slots=True)
class ReadinessObservation:
    """One readiness check of a target (``GET /v2/health/ready`` or gRPC ``ServerReady``)."""

    target: str
    at: float
    outcome: Outcome
    ready: bool
    duration_seconds: float
    error: str = ""
