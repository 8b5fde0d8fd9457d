"""Which of a target's optional APIs a scrape cycle asks: each is on until the server
shows it cannot answer it, then off for about an hour (:data:`UNSUPPORTED_RECHECK_CYCLES`)
in case the server was upgraded, with one log line each way.

Two switches per target: the statistics and config APIs themselves
(:class:`OptionalApi`), and the all-models form of the statistics request
(:class:`AllModelsStatistics`), which a server without it (MLServer; a Triton whose
answer passes the size cap) replaces with one request per model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tritonwatch.common.logs import get_logger
from tritonwatch.records.target_state import FetchStatus, ScrapeSource
from tritonwatch.triton_api.answer import ApiAnswer

_log = get_logger("scrape")

UNSUPPORTED_RECHECK_CYCLES = 240
"""Ask a switched-off API again after this many cycles (an hour at 15 s)."""


class _Switch:
    """On, or off since a cycle; asked again once it has been off long enough."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.off_since: int | None = None
        self.reported = False

    def wanted(self, cycle: int) -> bool:
        return self.off_since is None or cycle - self.off_since >= UNSUPPORTED_RECHECK_CYCLES

    def _turned_off(self, cycle: int) -> bool:
        """Switches off at ``cycle``; True the first time (the one to log)."""
        self.off_since = cycle
        first, self.reported = not self.reported, True
        return first


class OptionalApi(_Switch):
    """The statistics or config API of one target: on until the server shows it lacks it."""

    def __init__(self, target: str, source: ScrapeSource, protocol: str) -> None:
        super().__init__(target)
        self.source = source
        self.protocol = protocol

    def switch_off(self, cycle: int, evidence: Mapping[str, Any]) -> None:
        """``evidence``: what showed the API missing, as log fields (``http_status``…)."""
        if self._turned_off(cycle):
            _log.info(
                "scrape_feature_unsupported",
                target=self.target,
                source=str(self.source),
                protocol=self.protocol,
                **evidence,
                retry_after_cycles=UNSUPPORTED_RECHECK_CYCLES,
            )

    def answered(self) -> None:
        if self.off_since is not None:
            _log.info("scrape_feature_available", target=self.target, source=str(self.source))
        self.off_since, self.reported = None, False


class AllModelsStatistics(_Switch):
    """Whether one target's statistics are read in one request for every model (on
    until the server's all-models answer proves unusable, then off for a while)."""

    def switch_off(self, cycle: int, answer: ApiAnswer) -> None:
        if self._turned_off(cycle):
            _log.info(
                "scrape_stats_per_model",
                target=self.target,
                outcome=str(answer.status),
                http_status=answer.http_status,
                error=answer.error or "not a statistics response",
                retry_after_cycles=UNSUPPORTED_RECHECK_CYCLES,
            )

    def answered(self) -> None:
        self.off_since = None


_TRANSIENT = frozenset({FetchStatus.TIMEOUT, FetchStatus.CONNECTION_ERROR})


def is_cycle_failure(answer: ApiAnswer) -> bool:
    """True when the all-models answer failed as any request to the server would have
    (the server is slow, down or failing); False when it is only this form that does
    not work there, so the per-model form is worth asking."""
    if answer.missing_api is not None:
        return False
    if answer.status in _TRANSIENT:
        return True
    return answer.http_status is not None and answer.http_status >= 500
