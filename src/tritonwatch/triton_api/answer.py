"""What a model API answers: a document or an outcome, never an exception of the transport.

Every call of :class:`~tritonwatch.triton_api.client.ModelApiClient` answers an
:class:`ApiAnswer`, so a scraper (which must never raise) reads outcomes. A caller that
wants the document or an exception calls :meth:`ApiAnswer.document_or_raise` (or
:meth:`ApiAnswer.document_unless_missing` where an API is optional): the
:class:`ApiError` carries the whole answer, so it can be classified without parsing text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tritonwatch.records.target_state import FetchStatus


@dataclass(frozen=True, slots=True)
class ApiAnswer:
    """One answer of one API.

    ``status`` says how the call ended; its values are the canary's ``Outcome`` values
    of the same names. ``document`` is the decoded answer in the HTTP API's shape
    (success only): a JSON object, a list for the repository index, a bool for model
    readiness, None for load and unload. ``error`` is what went wrong, short
    (``HTTP 404``, ``gRPC UNAVAILABLE: …``, ``Connection refused``); ``message`` is the
    server's own words where it gave some (Triton's ``{"error": …}``, a gRPC status's
    details). ``missing_api`` is set when the answer shows that the server lacks the API
    (not only the model): what said so, as log fields (``{"http_status": 404}``,
    ``{"grpc_status": "UNIMPLEMENTED"}``). ``http_status`` is the status of an HTTP
    answer and ``grpc_code`` the status code name of a failed gRPC call
    (``"NOT_FOUND"``); None where there is none.
    """

    status: FetchStatus
    duration_seconds: float
    document: Any = None
    error: str = ""
    missing_api: Mapping[str, Any] | None = None
    http_status: int | None = None
    grpc_code: str | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status is FetchStatus.SUCCESS

    @property
    def reason(self) -> str:
        """What went wrong in words, the server's own included (``HTTP 400: load
        failed for model 'm': …``); never empty for a failure."""
        text = self.error or str(self.status)
        if self.message and self.message not in text:
            text = f"{text}: {self.message}"
        return text

    def document_or_raise(self) -> Any:
        """The document.

        Raises:
            ApiError: the call failed (the server lacks the API included).
        """
        if not self.ok:
            raise ApiError(self)
        return self.document

    def document_unless_missing(self) -> Any:
        """The document, or None when the server lacks the API (the model config on a
        KServe server that is not Triton).

        Raises:
            ApiError: the call failed otherwise.
        """
        if self.missing_api is not None:
            return None
        return self.document_or_raise()


class ApiError(Exception):
    """A failed call, as an exception; ``answer`` says how it failed."""

    def __init__(self, answer: ApiAnswer) -> None:
        super().__init__(answer.reason)
        self.answer = answer

    @property
    def status(self) -> FetchStatus:
        return self.answer.status
