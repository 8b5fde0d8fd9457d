"""The numbers HTTP/2 and gRPC name: RFC 9113's error codes and gRPC's status codes.

Kept apart from :mod:`~tritonwatch.wire.http2` because they are tables, not protocol:
what an error or a status is called in a message, and how gRPC maps an HTTP status.
"""

from __future__ import annotations

ERROR_NAMES = (
    "NO_ERROR",
    "PROTOCOL_ERROR",
    "INTERNAL_ERROR",
    "FLOW_CONTROL_ERROR",
    "SETTINGS_TIMEOUT",
    "STREAM_CLOSED",
    "FRAME_SIZE_ERROR",
    "REFUSED_STREAM",
    "CANCEL",
    "COMPRESSION_ERROR",
    "CONNECT_ERROR",
    "ENHANCE_YOUR_CALM",
    "INADEQUATE_SECURITY",
    "HTTP_1_1_REQUIRED",
)
"""RFC 9113 §7, by code."""
GRPC_STATUS_NAMES = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)
"""gRPC status codes by number, named as ``grpc.StatusCode`` names them."""
UNKNOWN, DEADLINE_EXCEEDED, INTERNAL, UNIMPLEMENTED, UNAVAILABLE = 2, 4, 13, 12, 14
HTTP_TO_GRPC = {
    400: INTERNAL,
    401: 16,
    403: 7,
    404: UNIMPLEMENTED,
    429: UNAVAILABLE,
    502: UNAVAILABLE,
    503: UNAVAILABLE,
    504: UNAVAILABLE,
}
"""gRPC's own mapping of an HTTP status on a non-gRPC answer (doc/http-grpc-status-mapping.md)."""
