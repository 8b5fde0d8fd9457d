"""Every target's scraper, kept in step with the config: what the daemon owns.

:class:`TritonScrapers` holds one :class:`~tritonwatch.scrape.target_scraper.TargetScraper`
per configured target. On reload, a target whose settings did not change keeps its
scraper (and with it the previous scrape, so rates continue without a gap); a changed
target gets a new one; a removed target's scraper is closed and its series vanish from
the exporter with it. The daemon schedules :meth:`TritonScrapers.scrape` per target and
hands :meth:`TritonScrapers.states` and :meth:`TritonScrapers.triton_gpus` to the
exporter's collectors.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType

from tritonwatch.config.schema import Config, TargetConfig
from tritonwatch.records.observations import ModelConfigChange, TritonGpuRates
from tritonwatch.records.target_state import ScrapeOutcome, TargetState
from tritonwatch.scrape.interfaces import Scraper
from tritonwatch.scrape.target_scraper import CanaryTotals, TargetScraper
from tritonwatch.state.canary_board import CanaryBoard

ScraperFactory = Callable[..., Scraper]
_Settings = tuple[TargetConfig, float, int, int]
"""What a scraper was built from: a target keeps its scraper while these stay equal."""


def canary_totals(stats: CanaryBoard, clock: Callable[[], float] = time.monotonic) -> CanaryTotals:
    """The canary's cumulative latency totals by (target, model), over every protocol.

    Reads :meth:`CanaryBoard.snapshot`, which also computes window quantiles: cheap for
    the tens of models a daemon usually watches.
    """

    def totals() -> Mapping[tuple[str, str], tuple[float, int]]:
        summed: dict[tuple[str, str], tuple[float, int]] = {}
        for snap in stats.snapshot(clock()):
            seconds, count = summed.get((snap.target, snap.model), (0.0, 0))
            summed[(snap.target, snap.model)] = (
                seconds + snap.latency_sum,
                count + snap.latency_count,
            )
        return summed

    return totals


def config_every(config: Config) -> int:
    """The config backstop in scrape cycles: ``scrape.config_refresh_interval`` over
    ``scrape.interval``, at least 1."""
    return max(1, round(config.scrape.config_refresh_interval / config.scrape.interval))


class TritonScrapers:
    """The scrapers of every configured target.

    Args:
        canary_totals: the canary's totals (:func:`canary_totals`), for ``network_client``.
        clock: monotonic seconds, passed to every scraper.
        config_every: the config backstop in cycles (:class:`TargetScraper`); None:
            ``scrape.config_refresh_interval`` over ``scrape.interval`` (:func:`config_every`).
        scraper_factory: builds a scraper (tests inject their own); takes the
            :class:`TargetScraper` arguments.
    """

    def __init__(
        self,
        *,
        canary_totals: CanaryTotals | None = None,
        clock: Callable[[], float] = time.monotonic,
        config_every: int | None = None,
        scraper_factory: ScraperFactory = TargetScraper,
    ) -> None:
        self._canary_totals = canary_totals
        self._clock = clock
        self._config_every = config_every
        self._factory = scraper_factory
        self._lock = threading.Lock()
        self._scrapers: dict[str, tuple[_Settings, Scraper]] = {}

    def apply(self, config: Config) -> None:
        """Makes the scrapers match ``config``: keeps unchanged targets, rebuilds changed
        ones, closes removed ones."""
        with self._lock:
            previous = self._scrapers
        built: dict[str, tuple[_Settings, Scraper]] = {}
        for target in config.targets:
            scrape = config.scrape
            every = self._config_every or config_every(config)
            settings = (target, scrape.timeout, scrape.max_body_bytes, every)
            kept = previous.get(target.name)
            if kept is not None and kept[0] == settings:
                built[target.name] = kept
                continue
            scraper = self._factory(
                target,
                config.scrape.timeout,
                self._clock,
                canary_totals=self._canary_totals,
                config_every=every,
                max_bytes=scrape.max_body_bytes,
            )
            built[target.name] = (settings, scraper)
        with self._lock:
            self._scrapers = built
        still_used = {id(scraper) for _, scraper in built.values()}
        for _, scraper in previous.values():
            if id(scraper) not in still_used:
                scraper.close()

    def scrape(self, target: str) -> ScrapeOutcome | None:
        """One cycle of ``target`` (the scheduler's job); None for a target no longer
        configured (a job that fired during a reload)."""
        with self._lock:
            entry = self._scrapers.get(target)
        return entry[1].scrape_once() if entry is not None else None

    def states(self) -> list[TargetState]:
        """Every target's latest state, sorted by target name."""
        with self._lock:
            scrapers = [scraper for _, scraper in self._scrapers.values()]
        return sorted((scraper.state() for scraper in scrapers), key=lambda s: s.target)

    def triton_gpus(self) -> Mapping[str, TritonGpuRates]:
        """GPUs as Triton reported them, one entry per GPU UUID across targets (two
        servers on one host report the same GPUs; either reading will do)."""
        gpus: dict[str, TritonGpuRates] = {}
        for state in self.states():
            gpus.update(state.gpus)
        return MappingProxyType(gpus)

    def drain_config_changes(self) -> list[ModelConfigChange]:
        """Every target's queued config changes, removed from the queues, oldest first."""
        with self._lock:
            scrapers = [scraper for _, scraper in self._scrapers.values()]
        changes = [change for scraper in scrapers for change in scraper.drain_config_changes()]
        return sorted(changes, key=lambda change: change.at)

    def mark_config_due(self, target: str, model: str) -> None:
        """Has ``target``'s next cycle read ``model``'s config (after the daemon loaded
        one, say); nothing for a target not configured."""
        with self._lock:
            entry = self._scrapers.get(target)
        if entry is not None:
            entry[1].mark_config_due(model)

    def take_reloaded(self) -> set[tuple[str, str]]:
        """(target, model) of every model the scrapers saw loaded again since the last
        call (model discovery reads them again)."""
        with self._lock:
            scrapers = [(name, scraper) for name, (_, scraper) in self._scrapers.items()]
        return {(name, model) for name, scraper in scrapers for model in scraper.take_reloaded()}

    def close(self) -> None:
        """Closes every scraper's HTTP session."""
        with self._lock:
            scrapers, self._scrapers = list(self._scrapers.values()), {}
        for _, scraper in scrapers:
            scraper.close()
