"""How one plain canary request's answer is judged: its outcome, its message, when it
arrived, and the latency it is recorded with.

Pure functions of the answer and the plan's values: the canary
(:class:`~tritonwatch.probe.canary.model_canary.ModelCanary`) does the bookkeeping
(failure log, breaker, statistics) around them, on whichever thread finished the request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tritonwatch.kserve.infer_response import ResponseDecodeError, check_outputs
from tritonwatch.probe.canary.clients import classify_error, error_text
from tritonwatch.probe.canary.refusals import canary_outcome
from tritonwatch.records.observations import Outcome


@dataclass(frozen=True)
class Verdict:
    """One answer judged: ``error`` is what it failed with (None: a success), ``text``
    that error as the logs and the status page show it, ``received`` when its last byte
    arrived if its client says (None for a failure without an answer)."""

    outcome: Outcome
    text: str
    error: Exception | None
    received: float | None


def judge_answer(answer: Any, outputs: Sequence[str], protocol: str, timeout: float) -> Verdict:
    """Judges ``answer`` (a decoded result, or the exception the request ended with):
    an answer that decodes but lacks one of ``outputs`` is a ``bad_response``; any
    other failure is classified by ``protocol`` (refusals.py: a model's own refusal is
    ``rejected``); ``timeout`` words a timeout's message."""
    received: float | None = None
    try:
        if isinstance(answer, BaseException):
            raise answer
        received = received_at(answer)
        check_outputs(answer, outputs)
    except Exception as error:
        # (a ResponseDecodeError too: it answered, but not with what was asked)
        outcome = (
            Outcome.BAD_RESPONSE
            if isinstance(error, ResponseDecodeError)
            else canary_outcome(classify_error(error, protocol), error, protocol)
        )
        return Verdict(outcome, error_text(error, timeout=timeout), error, received)
    return Verdict(Outcome.SUCCESS, "", None, received)


def recorded_latency(outcome: Outcome, elapsed: float, timeout: float) -> float | None:
    """The latency a request is recorded with: ``elapsed`` for an answer (a bad one
    too), the whole ``timeout`` for a timeout, None for a failure that says nothing of
    the server's time (a refused connection, an answer cut off)."""
    if outcome == Outcome.TIMEOUT:
        return timeout
    if outcome not in (Outcome.SUCCESS, Outcome.BAD_RESPONSE):
        return None
    return elapsed


def received_at(result: Any) -> float | None:
    """When the answer's last byte arrived, if its client says (ours do: the decoding
    that follows is client CPU, which perf_analyzer does not count either)."""
    received = getattr(result, "received_at", None)
    return received if isinstance(received, float) else None
