"""The daemon's own metrics: build info, target readiness, config reloads.

A custom collector reads the current state at scrape time (STYLE: values read at
scrape time go through ``collect()``), so series of removed targets vanish with
them and nothing is registered at import time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from tritonwatch.common.build_facts import BuildFacts
from tritonwatch.records.observations import ReadinessObservation


@dataclass(frozen=True, slots=True)
class SelfStatus:
    """What the daemon knows about itself at one instant."""

    build: BuildFacts
    readiness: dict[str, ReadinessObservation]
    last_reload_successful: bool
    last_reload_success_timestamp: float


class SelfCollector(Collector):
    """Renders :class:`SelfStatus` as ``tritonwatch_*`` self-monitoring metrics."""

    def __init__(self, status: Callable[[], SelfStatus]) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        status = self._status()
        build = InfoMetricFamily(
            "tritonwatch_build",
            "tritonwatch's version, the commit it was built from and its Python; always 1.",
        )
        facts = status.build
        build.add_metric(
            [], {"version": facts.version, "revision": facts.revision, "python": facts.python}
        )
        yield build

        up = GaugeMetricFamily(
            "tritonwatch_up",
            "1 when the target answered its readiness check (Triton /v2/health/ready), else 0.",
            labels=["target"],
        )
        for target, observation in sorted(status.readiness.items()):
            up.add_metric([target], 1.0 if observation.ready else 0.0)
        yield up

        yield GaugeMetricFamily(
            "tritonwatch_config_last_reload_successful",
            "1 when the last attempt to load the config file succeeded, else 0.",
            value=1.0 if status.last_reload_successful else 0.0,
        )
        yield GaugeMetricFamily(
            "tritonwatch_config_last_reload_success_timestamp_seconds",
            "Unix time of the last successful config load.",
            value=status.last_reload_success_timestamp,
        )
