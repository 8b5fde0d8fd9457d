"""Evaluator as metrics: SLO objectives, burn rates and budgets, active recommendations,
and the health of alert delivery (docs/design.md §8).

Custom collectors read the latest evaluation at scrape time, so a model removed from
the config or a recommendation that cleared simply stops appearing. A window without
events has no burn rate and exports nothing (never 0: no traffic is not good traffic).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tritonwatch.analysis.advisor_records import Recommendation
from tritonwatch.analysis.slo import SLOSpec, SLOStatus
from tritonwatch.export.alert_queue import QueueStats


class SLOCollector(Collector):
    """Renders the latest SLO evaluation and the active recommendations.

    Args:
        specs: the configured SLOs (objectives are exported even before any event).
        statuses: the latest :meth:`SLOTracker.evaluate` result.
        recommendations: :meth:`RecommendationBoard.active`.
        blocked: :meth:`RecommendationBoard.blocked`, (target, model) → reason.
        full: whether ``/metrics`` is at ``exporter.detail: full``; below it the burn
            rates per window (full only) are not built.
    """

    def __init__(
        self,
        specs: Callable[[], Sequence[SLOSpec]],
        statuses: Callable[[], Sequence[SLOStatus]],
        recommendations: Callable[[], Sequence[Recommendation]],
        blocked: Callable[[], Mapping[tuple[str, str], str]] = dict,
        full: Callable[[], bool] = lambda: True,
    ) -> None:
        self._full = full
        self._specs = specs
        self._statuses = statuses
        self._recommendations = recommendations
        self._blocked = blocked

    def collect(self) -> Iterator[Metric]:
        objective = GaugeMetricFamily(
            "tritonwatch_slo_objective_ratio",
            "The SLO's objective: the fraction of events that must be good.",
            labels=["target", "model", "slo"],
        )
        for spec in self._specs():
            objective.add_metric([spec.target, spec.model, str(spec.kind)], spec.objective)
        yield objective

        burn = GaugeMetricFamily(
            "tritonwatch_slo_burn_rate",
            "Error ratio over the window divided by the error budget (1 − objective); "
            "1 spends the budget exactly over the SLO period.",
            labels=["target", "model", "slo", "window", "source"],
        )
        budget = GaugeMetricFamily(
            "tritonwatch_slo_error_budget_remaining_ratio",
            "1 − burn rate over the SLO period (as far back as the daemon's event store "
            "reaches: 31 days); negative when overspent.",
            labels=["target", "model", "slo", "source"],
        )
        full = self._full()
        for status in self._statuses():
            labels = [status.spec.target, status.spec.model, str(status.spec.kind)]
            for window, rate in status.burn_rates.items() if full else ():
                if rate is not None:
                    burn.add_metric([*labels, window, str(status.source)], rate)
            remaining = status.error_budget_remaining
            if remaining is not None:
                budget.add_metric([*labels, str(status.source)], remaining)
        if full:
            yield burn
        yield budget

        recommendation = GaugeMetricFamily(
            "tritonwatch_recommendation",
            "1 while the advisor recommends this action for the model; the current and "
            "proposed values are in the TritonTuningRecommendation alert and the log.",
            labels=["target", "model", "action", "parameter", "severity"],
        )
        for r in self._recommendations():
            recommendation.add_metric(
                [r.target, r.model, str(r.action), r.parameter, str(r.severity)], 1.0
            )
        yield recommendation

        blocked = GaugeMetricFamily(
            "tritonwatch_advice_blocked",
            "1 while a model burns its SLO with a bottleneck and the advisor sees no safe "
            "change; reason says why (host_cpu_saturated, gpu_saturated, no_config_api, "
            "needs_model_change, needs_client_change, no_readings, already_at_limit).",
            labels=["target", "model", "reason"],
        )
        for (target, model), reason in sorted(self._blocked().items()):
            blocked.add_metric([target, model, reason], 1.0)
        yield blocked


class AlertDeliveryCollector(Collector):
    """Renders each alert receiver's queue: length, sent, dropped, rejected, failures."""

    def __init__(self, queues: Callable[[], Sequence[QueueStats]]) -> None:
        self._queues = queues

    def collect(self) -> Iterator[Metric]:
        labels = ["receiver"]
        queued = GaugeMetricFamily(
            "tritonwatch_alerts_queue_length", "Alerts waiting for delivery.", labels=labels
        )
        counters = {
            "sent": CounterMetricFamily(
                "tritonwatch_alerts_sent", "Alerts delivered.", labels=labels
            ),
            "dropped": CounterMetricFamily(
                "tritonwatch_alerts_dropped",
                "Alerts dropped because the queue was full.",
                labels=labels,
            ),
            "rejected": CounterMetricFamily(
                "tritonwatch_alerts_rejected",
                "Alerts the receiver refused as invalid (HTTP 4xx).",
                labels=labels,
            ),
            "failed_attempts": CounterMetricFamily(
                "tritonwatch_alert_delivery_failures",
                "Delivery attempts that failed and will be retried.",
                labels=labels,
            ),
        }
        for stats in self._queues():
            queued.add_metric([stats.receiver], stats.queued)
            for field, family in counters.items():
                family.add_metric([stats.receiver], getattr(stats, field))
        yield queued
        yield from counters.values()
