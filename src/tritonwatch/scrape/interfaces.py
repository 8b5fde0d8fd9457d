"""The interfaces of the scrape layer: what its collection asks of a target's scraper,
and what a scraper asks of the statistics and config APIs.

They are :class:`~typing.Protocol` classes so the HTTP and gRPC APIs (and a test's
stand-in) are interchangeable, and they live together so the layer's seams can be read
in one place, with the one answer the APIs give (:class:`ApiAnswer`). They import
records only, so no module that implements them is imported back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tritonwatch.records.target_state import FetchStatus

if TYPE_CHECKING:
    from tritonwatch.records.observations import ModelConfigChange, ModelKey
    from tritonwatch.records.target_state import ScrapeOutcome, ScrapeSource, TargetState


@dataclass(frozen=True, slots=True)
class ApiAnswer:
    """One model's answer from one API.

    ``document`` is the decoded answer in the HTTP API's shape (on success only).
    ``missing_api`` is set when the answer shows the server lacks the API: what said
    so, as log fields (``{"http_status": 404}``, ``{"grpc_status": "UNIMPLEMENTED"}``).
    ``http_status`` is the HTTP status of an HTTP answer (None over gRPC, or when no
    answer came).
    """

    status: FetchStatus
    duration_seconds: float
    document: Any = None
    error: str = ""
    missing_api: Mapping[str, Any] | None = None
    http_status: int | None = None

    @property
    def ok(self) -> bool:
        return self.status is FetchStatus.SUCCESS


class Scraper(Protocol):
    """What :class:`~tritonwatch.scrape.triton_scrapers.TritonScrapers` needs of a target's
    scraper (:class:`~tritonwatch.scrape.target_scraper.TargetScraper`)."""

    def scrape_once(self) -> ScrapeOutcome: ...

    def state(self) -> TargetState: ...

    def drain_config_changes(self) -> list[ModelConfigChange]: ...

    def close(self) -> None: ...


class ModelApis(Protocol):
    """The statistics and config APIs of one target."""

    protocol: str

    def read(self, source: ScrapeSource, key: ModelKey, deadline: float) -> ApiAnswer:
        """``source``'s answer for ``key`` by monotonic time ``deadline``; never raises."""
        ...

    def read_all_statistics(self, deadline: float) -> ApiAnswer:
        """The statistics of every loaded model in one answer; never raises."""
        ...

    def close(self) -> None: ...
