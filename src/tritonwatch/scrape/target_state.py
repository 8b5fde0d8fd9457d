"""What one target's scrapes produced: the records the exporter and the advisor read.

Immutable, so the scraper publishes a new :class:`TargetState` after each cycle by
swapping one reference, and readers on other threads never see half a cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from tritonwatch.analysis.breakdown import Bottleneck, LatencyBreakdown
from tritonwatch.observations import (
    BatchStatisticsRates,
    ModelConfigSnapshot,
    ModelRates,
    TritonGpuRates,
    TritonRates,
    TritonSummary,
)
from tritonwatch.scrape.fetch import FetchStatus


class Source(StrEnum):
    """What was scraped; the ``source`` label of the self-monitoring metrics."""

    METRICS = "metrics"
    STATS = "stats"
    CONFIG = "config"


@dataclass(frozen=True, slots=True)
class SourceOutcome:
    """How one source's requests of one cycle ended (all models' requests, for the
    statistics and config APIs: the first failure wins, durations add up)."""

    source: Source
    status: FetchStatus
    duration_seconds: float
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is FetchStatus.SUCCESS


@dataclass(frozen=True, slots=True)
class ScrapeOutcome:
    """The result of :meth:`TargetScraper.scrape_once`; never an exception.

    ``sources`` holds the sources attempted in this cycle (the config API is polled
    only every few cycles, and an API the server lacks is not asked). ``rates`` is None
    on the first successful scrape and after a failed one.
    """

    target: str
    at: float
    sources: Mapping[Source, SourceOutcome]
    bad_lines: int
    rates: TritonRates | None

    @property
    def ok(self) -> bool:
        """True when ``/metrics`` was read."""
        return self.sources[Source.METRICS].ok


@dataclass(frozen=True, slots=True)
class ModelState:
    """The latest findings of one configured model; None where the window had no data.

    ``server_summary`` is Triton's request-duration summary (microseconds, as printed)
    when the server exports summaries.
    """

    model: str
    rates: ModelRates | None = None
    server_summary: TritonSummary | None = None
    batches: BatchStatisticsRates | None = None
    breakdown: LatencyBreakdown | None = None
    bottleneck: Bottleneck | None = None
    config: ModelConfigSnapshot | None = None


@dataclass(frozen=True, slots=True)
class TargetState:
    """Everything exported for one target, as of its last cycle.

    ``sources`` has the last attempt of each source the server supports; ``server``
    holds Triton's server-wide gauges (``nv_cpu_*``, pinned memory) from the last scrape;
    ``failures`` counts the failed attempts so far by source and outcome.
    """

    target: str
    sources: Mapping[Source, SourceOutcome]
    bad_lines_total: int
    models: Mapping[str, ModelState]
    gpus: Mapping[str, TritonGpuRates]
    server: Mapping[str, float]
    failures: Mapping[tuple[Source, FetchStatus], int] = field(default_factory=dict)
