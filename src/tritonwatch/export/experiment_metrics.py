"""Config-change experiments as they reach the outside: a gauge and an info alert.

``tritonwatch_experiment_verdict`` holds the latest verdict of each (target, model,
parameter) change; :func:`experiment_alert` is the ``TritonExperimentVerdict`` alert
announcing a verdict (severity info) for an hour after it is reached.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tritonwatch.analysis.experiments import Experiment
from tritonwatch.export.alerts import AlertSpec

EXPERIMENT_ALERT = "TritonExperimentVerdict"
EXPERIMENT_ALERT_SECONDS = 3600.0
"""How long a verdict is announced after it is reached."""


def experiment_alert(experiment: Experiment, runbook: str) -> AlertSpec:
    """The info alert announcing ``experiment``'s verdict, with the p95 before and after."""
    before, after = experiment.p95_before, experiment.p95_after
    numbers = (
        f" (canary p95 {before * 1e3:.1f} ms → {after * 1e3:.1f} ms)"
        if before is not None and after is not None
        else ""
    )
    return AlertSpec(
        labels={
            "alertname": EXPERIMENT_ALERT,
            "severity": "info",
            "target": experiment.target,
            "model": experiment.model,
            "action": "experiment",
            "parameter": experiment.parameter,
        },
        annotations={
            "summary": (
                f"{experiment.model}: change of {experiment.parameter} → {experiment.verdict}"
            ),
            "description": experiment.reason + numbers,
            "runbook_url": f"{runbook}#experiments",
        },
    )


class ExperimentCollector(Collector):
    """Renders ``tritonwatch_experiment_verdict`` from the experiments so far."""

    def __init__(self, experiments: Callable[[], list[Experiment]]) -> None:
        self._experiments = experiments

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "tritonwatch_experiment_verdict",
            "1 for the latest verdict of each (target, model, parameter) config change experiment.",
            labels=["target", "model", "parameter", "verdict"],
        )
        latest: dict[tuple[str, str, str], Experiment] = {}
        for experiment in self._experiments():
            latest[(experiment.target, experiment.model, experiment.parameter)] = experiment
        for (target, model, parameter), experiment in sorted(latest.items()):
            family.add_metric([target, model, parameter, experiment.verdict], 1.0)
        yield family
