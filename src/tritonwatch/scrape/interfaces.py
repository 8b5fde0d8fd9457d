"""The interfaces of the scrape layer: what its collection asks of a target's scraper,
and what a scraper asks of the statistics and config APIs.

They are :class:`~typing.Protocol` classes so the HTTP and gRPC APIs (and a test's
stand-in) are interchangeable, and they live together so the layer's seams can be read
in one place. The record types their signatures name are imported for type checking
only: importing this module loads none of them and makes no cycle with the modules that
implement it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tritonwatch.observations import ModelConfigChange, ModelKey
    from tritonwatch.scrape.model_apis import ApiAnswer
    from tritonwatch.target_state import ScrapeOutcome, ScrapeSource, TargetState


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
