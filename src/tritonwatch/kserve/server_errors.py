"""The error a server's refusal becomes, without importing ``tritonclient``.

``tritonclient.utils.InferenceServerException`` is what ``tritonclient`` raises (its
gRPC client, the sweep's and tune's blocking clients), but importing it imports numpy
and ``ml_dtypes`` (16 MiB) into a daemon whose HTTP canary never uses ``tritonclient``.
So the lean HTTP client raises :class:`ServerError`, which has the same face
(``message()``, ``status()`` as a string, ``str`` as ``[status] message``), and the
code that classifies failures accepts both: :func:`server_error_types` names
``tritonclient``'s class only once something in the process imported it, as no error
of that class can exist before.
"""

from __future__ import annotations

import sys
from typing import Protocol, cast


class ServerErrorLike(Protocol):
    """What the canary reads from either error class."""

    def message(self) -> str | None: ...

    def status(self) -> str | None: ...


class ServerError(Exception):
    """A server's error answer, as ``tritonclient.http`` raises it (the status a string)."""

    def __init__(
        self, msg: str | None, status: str | None = None, debug_details: str | None = None
    ) -> None:
        super().__init__(msg)
        self._msg = msg
        self._status = status
        self._debug_details = debug_details

    def __str__(self) -> str:
        text = super().__str__() if self._msg is None else self._msg
        return f"[{self._status}] {text}" if self._status is not None else text

    def message(self) -> str | None:
        return self._msg

    def status(self) -> str | None:
        return self._status

    def debug_details(self) -> str | None:
        return self._debug_details


def server_error_types() -> tuple[type[Exception], ...]:
    """:class:`ServerError`, and ``InferenceServerException`` once ``tritonclient.utils``
    is loaded (for ``except`` clauses and ``isinstance``)."""
    module = sys.modules.get("tritonclient.utils")
    theirs = getattr(module, "InferenceServerException", None)
    if isinstance(theirs, type) and issubclass(theirs, Exception):
        return (ServerError, theirs)
    return (ServerError,)


def as_server_error(error: BaseException) -> ServerErrorLike | None:
    """``error`` when it is a server's refusal (from our client or ``tritonclient``'s)."""
    return cast(ServerErrorLike, error) if isinstance(error, server_error_types()) else None
