"""Errors the simulator returns to clients, coded the way Triton codes them.

Triton's core reports a ``TRITONSERVER_Error`` code and each frontend maps it: the HTTP
server to a status (``HttpCodeFromError`` in ``http_server.cc``: NOT_FOUND → 404,
UNAVAILABLE → 503, INTERNAL → 500, UNSUPPORTED → 501, everything else → 400) with a
``{"error": "..."}`` body, the gRPC server to a ``grpc.StatusCode``. One table here keeps
both frontends in step.
"""

from __future__ import annotations

import enum

import grpc


class ErrorCode(enum.Enum):
    """Triton's error codes, each carrying its HTTP status and gRPC status code."""

    INVALID_ARG = (400, grpc.StatusCode.INVALID_ARGUMENT)
    NOT_FOUND = (404, grpc.StatusCode.NOT_FOUND)
    UNAVAILABLE = (503, grpc.StatusCode.UNAVAILABLE)
    INTERNAL = (500, grpc.StatusCode.INTERNAL)
    UNSUPPORTED = (501, grpc.StatusCode.UNIMPLEMENTED)
    CANCELLED = (400, grpc.StatusCode.CANCELLED)

    @property
    def http_status(self) -> int:
        """The HTTP status Triton's HTTP frontend answers with."""
        status: int = self.value[0]
        return status

    @property
    def grpc_status(self) -> grpc.StatusCode:
        """The gRPC status Triton's gRPC frontend answers with."""
        status: grpc.StatusCode = self.value[1]
        return status


class SimError(Exception):
    """A request failed; the frontends turn it into Triton's error response."""

    def __init__(self, code: ErrorCode, message: str, *, detail: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.detail = detail
        """The cause a server logs where Triton tells the client less (a failed load)."""


def unknown_model(name: str, version: str = "") -> SimError:
    """The error Triton returns for a model (version) it does not know."""
    if version:
        return SimError(
            ErrorCode.NOT_FOUND,
            f"Request for unknown model: '{name}' version {version} is not found",
        )
    return SimError(ErrorCode.NOT_FOUND, f"Request for unknown model: '{name}' is not found")


def unavailable_model(name: str) -> SimError:
    """The error Triton returns for a known model that is not loaded (NOT_FOUND, like an
    unknown one: real Triton 2.51 answers 404 over HTTP and NOT_FOUND over gRPC)."""
    return SimError(
        ErrorCode.NOT_FOUND,
        f"Request for unknown model: '{name}' has no available versions",
    )


def statistics_unavailable(name: str, version: str = "") -> SimError:
    """The statistics extension's own answer for a model (version) it cannot report:
    INVALID_ARG (400), unlike the other model endpoints' 404."""
    if version:
        return SimError(
            ErrorCode.INVALID_ARG,
            f"requested model version is not available for model '{name}'",
        )
    return SimError(ErrorCode.INVALID_ARG, f"requested model '{name}' is not available")
