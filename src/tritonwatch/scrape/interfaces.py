"""The interfaces of the scrape layer: what its collection asks of a target's scraper.

A :class:`~typing.Protocol`, so a test's stand-in can take a scraper's place; it imports
records only, so no module that implements it is imported back. What a scraper asks of
the statistics and config APIs is the model API client's
(:class:`~tritonwatch.triton_api.client.ModelApiClient`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tritonwatch.records.observations import ModelConfigChange
    from tritonwatch.records.target_state import ScrapeOutcome, TargetState


class Scraper(Protocol):
    """What :class:`~tritonwatch.scrape.triton_scrapers.TritonScrapers` needs of a target's
    scraper (:class:`~tritonwatch.scrape.target_scraper.TargetScraper`)."""

    def scrape_once(self) -> ScrapeOutcome: ...

    def state(self) -> TargetState: ...

    def drain_config_changes(self) -> list[ModelConfigChange]: ...

    def mark_config_due(self, model: str) -> None: ...

    def take_reloaded(self) -> set[str]: ...

    def close(self) -> None: ...
