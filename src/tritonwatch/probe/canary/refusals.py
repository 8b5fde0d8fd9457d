"""The canary's own request refused: ``rejected``, and a canary that stops insisting.

KServe v2 has no 4xx that is the server's fault (docs/design.md §4b): an HTTP 400 or
a gRPC ``INVALID_ARGUMENT`` from a model the server serves says the *request* is wrong
(an input shape, a batch size, a backend's own check such as token ids out of range,
a stateful model's missing START). Counted as the server's failure it would burn the
availability SLO and page for a model that serves its real clients well. So it is the
outcome ``rejected`` (:func:`canary_outcome`), which the availability SLI, the
not-serving verdict and the generated rules leave out (``NOT_THE_SERVERS``). A 400
that speaks of the model itself (unknown, no version available, not ready: older
Triton releases answered those with 400) or of the request's fate on the server
(cancelled, timed out in its queue) stays the server's error, as before. The
streaming canary keeps its classes (a 400 to a stream stays ``http_error``).

After :data:`REFUSALS_IN_ROW` refusals in a row the model's canary sends only one
request every :data:`REFUSED_PROBE_SECONDS` until one succeeds (:class:`RefusalWatch`):
its input will not become right by repeating it. Meanwhile the canary board says so
(``tritonwatch_canary_input_refused`` 1, and the status page: "the model refuses the
canary's input: give canary.input_data", with Triton's error text). That is a ticket's
worth of news at most, never a page.
"""

from __future__ import annotations

from tritonwatch.common.logs import get_logger
from tritonwatch.kserve.server_errors import as_server_error
from tritonwatch.records.observations import Outcome
from tritonwatch.state.canary_board import CanaryBoard, SeriesKey

_log = get_logger("canary")
REFUSALS_IN_ROW = 5
"""Refused requests in a row after which a model's canary backs off: enough that a
one-off refusal (a sequence cut short) does not, few enough to stop within seconds."""
REFUSED_PROBE_SECONDS = 60.0
"""While backed off, one request this often: a fixed model (or input) is seen within a
minute, and a model that refuses costs its server one request a minute."""
_REFUSED_STATUSES = {"http": "400", "grpc": "StatusCode.INVALID_ARGUMENT"}
_MODEL_STATE_WORDS = (
    "unknown model",
    "no available versions",
    "not ready",
    "not found",
    "unavailable",
    "cancelled",
    "canceled",
    "timeout expired",
)
"""Words of Triton's answers about the model itself or the request's fate on the
server (cancelled, timed out in its queue) rather than about what the request holds."""


def refused_input(error: BaseException, protocol: str) -> bool:
    """Whether ``error`` is the server refusing the request's content (HTTP 400, gRPC
    INVALID_ARGUMENT) rather than saying something of the model's state."""
    server = as_server_error(error)
    refused = _REFUSED_STATUSES.get(protocol)
    if server is None or refused is None:
        return False
    status = str(server.status() or "")
    if status != refused and status != refused.removeprefix("StatusCode."):
        return False
    text = str(server.message() or "").lower()
    return not any(words in text for words in _MODEL_STATE_WORDS)


def canary_outcome(outcome: Outcome, error: BaseException, protocol: str) -> Outcome:
    """``outcome`` (the failure's class), made ``rejected`` when the request was refused."""
    if outcome in (Outcome.HTTP_ERROR, Outcome.GRPC_ERROR) and refused_input(error, protocol):
        return Outcome.REJECTED
    return outcome


class RefusalWatch:
    """One model canary's refusals: counted, backed off from, shown on its board."""

    def __init__(self, board: CanaryBoard, key: SeriesKey) -> None:
        self._board = board
        self._key = key
        self.in_row = 0
        self.refusing = False
        """Backed off: one request per :data:`REFUSED_PROBE_SECONDS` until a success."""
        self._next_probe = 0.0

    def allows(self, now: float) -> bool:
        """Every send, or while refusing one per :data:`REFUSED_PROBE_SECONDS`."""
        if not self.refusing:
            return True
        if now >= self._next_probe:
            self._next_probe = now + REFUSED_PROBE_SECONDS
            return True
        return False

    def record(self, outcome: Outcome, error: str, now: float) -> None:
        """Takes one request's outcome (``error``: Triton's text of a refusal)."""
        if outcome == Outcome.REJECTED:
            self.in_row += 1
            if self.refusing:
                self._board.set_input_refused(self._key, error)
            elif self.in_row >= REFUSALS_IN_ROW:
                self.refusing, self._next_probe = True, now + REFUSED_PROBE_SECONDS
                self._board.set_input_refused(self._key, error)
                target, model, protocol = self._key
                _log.warning(
                    "canary_input_refused",
                    target=target,
                    model=model,
                    protocol=protocol,
                    refused=self.in_row,
                    error=error,
                    probe_every_seconds=REFUSED_PROBE_SECONDS,
                    hint="give canary.input_data",
                )
            return
        self.in_row = 0
        if outcome == Outcome.SUCCESS and self.refusing:
            self.refusing = False
            self._board.set_input_refused(self._key, None)
            target, model, protocol = self._key
            _log.info("canary_input_accepted", target=target, model=model, protocol=protocol)
