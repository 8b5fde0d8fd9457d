"""One model's canary's way to the library path: a second opinion on answers our readers
refused, and the path its requests take once the library read one (issue 25: our faults
are ours).

An answer one of our readers could not read (:func:`~tritonwatch.probe.canary.library_path.doubted`)
is asked for once more through libraries (:mod:`~tritonwatch.probe.canary.library_path`):

* the library reads it: the outcome is ``client_error`` (left out of the availability
  SLO), one ``canary_client_error`` log line names our error and the first line of the
  bytes, and the model's canary leaves the fast path for good (until the daemon
  restarts or the canary is rebuilt): every later request goes through the library, in
  a worker thread, so a bug of ours costs one outcome, not a page per request;
* the library cannot read it either: it is the server's (``bad_response``, as before),
  and that verdict stands for :data:`VERDICT_SECONDS` — a server that keeps sending
  broken answers is not sent every request twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from tritonwatch.common.logs import get_logger
from tritonwatch.probe.canary.library_path import (
    ClientFaultError,
    LibraryCall,
    answer_start,
    doubted,
)
from tritonwatch.probe.infer_response import check_outputs

_log = get_logger("canary")
VERDICT_SECONDS = 60.0
"""After the library, too, could not read an answer, doubted answers are the server's
without asking again for this long."""


class LibraryFallback:
    """Second opinions and the library path of one model's canary (one per ModelCanary)."""

    def __init__(
        self,
        fields: dict[str, str],
        make_call: Callable[[], LibraryCall],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``fields``: the log lines' target, model and protocol; ``make_call``: builds
        the library call of the canary's request (once, on first need)."""
        self._fields = fields
        self._make_call = make_call
        self._call: LibraryCall | None = None
        self._clock = clock
        self._server_until = 0.0
        """Until when doubted answers are the server's without a second opinion."""
        self.active = False
        """The library read what we could not: the canary's requests go through it."""
        self.client_errors = 0

    def should_ask(self, error: BaseException) -> bool:
        """Whether ``error`` gets a second opinion: our reader refused the answer, the
        canary is still on its own readers, and no recent verdict says the server's."""
        return not self.active and doubted(error) and self._clock() >= self._server_until

    def call(self) -> LibraryCall:
        if self._call is None:
            self._call = self._make_call()
        return self._call

    async def infer(self, timeout: float) -> Any:
        """One request through the library (in a worker thread: its clients block)."""
        return await asyncio.to_thread(self.call(), timeout)

    async def second_opinion(
        self, error: BaseException, start: bytes, outputs: Sequence[str], timeout: float
    ) -> BaseException:
        """The outcome of an answer our reader refused with ``error``: a
        :class:`ClientFaultError` when the library reads the same request's answer (with every
        output in ``outputs``), else ``error`` itself (the server's)."""
        try:
            result = await self.infer(timeout)
            check_outputs(result, outputs)
        except asyncio.CancelledError:
            raise
        except Exception as library_error:  # any failure: it is not ours
            self._server_until = self._clock() + VERDICT_SECONDS
            _log.info(
                "canary_library_agrees",
                **self._fields,
                error=str(error)[:200],
                library_error=f"{type(library_error).__name__}: {str(library_error)[:200]}",
            )
            return error
        fault = ClientFaultError(error, answer_start(start or error_start(error)))
        self.client_errors += 1
        self.active = True
        _log.warning(
            "canary_client_error",
            **self._fields,
            error=f"{type(error).__name__}: {str(error)[:200]}",
            answer_start=fault.answer_start,
            now_on="library",
        )
        return fault


def error_start(error: BaseException) -> bytes:
    """The first bytes of the answer a reader kept on ``error`` (``answer_start``)."""
    start = getattr(error, "answer_start", b"")
    return start if isinstance(start, bytes) else b""
