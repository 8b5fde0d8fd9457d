"""How much ``/metrics`` says: the exporter's detail levels (``exporter.detail``).

Three levels, each a superset of the one before:

* ``minimal`` — what the shipped alerts and recording rules read, and the daemon's own
  health: SLI event counters and objectives, readiness, stalled or refused canaries,
  recommendations, capacity and headroom, alert delivery, the process.
* ``standard`` (the default) — what the shipped dashboards read as well: latency
  quantiles over the 5-minute window, the stage breakdown in seconds, the bottleneck,
  Triton's per-model rates and config, GPUs, pipelines, LLM serving. About 36 series per
  plain model with two SLOs.
* ``full`` — everything: burn rates per window, the canary's latency histograms
  (a bucket at every SLO threshold), ratios next to the seconds they come from, the
  1-minute quantile window, zero-valued outcome and failure-reason series.

What ``standard`` leaves out is what Prometheus can compute from what it keeps (burn
rates from the SLI counters through the shipped recording rules; a ratio from its
seconds) or what a breakdown says only when it is not zero. Below ``full``:

* series of a *breakdown* family (an outcome, a failure reason, a batch size) whose value
  is 0 are left out, except a canary's ``success``: they appear once they count
  something (a rate() over a series that starts at its first failure sees that failure
  only from the second on; the SLI counters, which alerts read, are always there);
* the canary's sliding-window quantiles leave out :data:`DROPPED_WINDOW` (Triton's own
  summaries, ``source="server"``, have that window only and keep it).

The status page, the advisor and the daemon's own alerts read the in-process values and
are the same at every level. Each family's level is in the metrics reference.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry

from tritonwatch.config.detail import Detail

MINIMAL_FAMILIES = frozenset(
    {
        "tritonwatch_build_info",
        "tritonwatch_config_last_reload_successful",
        "tritonwatch_config_last_reload_success_timestamp_seconds",
        "tritonwatch_up",
        "tritonwatch_scrape_success",
        "tritonwatch_slo_events_total",
        "tritonwatch_slo_good_events_total",
        "tritonwatch_slo_objective_ratio",
        "tritonwatch_slo_alert_min_bad_events",
        "tritonwatch_slo_error_budget_remaining_ratio",
        "tritonwatch_canary_requests_total",
        "tritonwatch_canary_stalled",
        "tritonwatch_canary_input_refused",
        "tritonwatch_canary_circuit_open",
        "tritonwatch_canary_rate_scale_ratio",
        "tritonwatch_canary_engine_restarts_total",
        "tritonwatch_recommendation",
        "tritonwatch_advice_blocked",
        "tritonwatch_capacity_inferences_per_second",
        "tritonwatch_capacity_load_inferences_per_second",
        "tritonwatch_capacity_headroom_ratio",
        "tritonwatch_capacity_stale",
        "tritonwatch_desired_replicas",
        "tritonwatch_alerts_queue_length",
        "tritonwatch_alerts_sent_total",
        "tritonwatch_alerts_dropped_total",
        "tritonwatch_alerts_rejected_total",
        "tritonwatch_alert_delivery_failures_total",
    }
)
"""Families exported at every level (exposed names: counters with ``_total``)."""

FULL_FAMILIES = frozenset(
    {
        "tritonwatch_slo_burn_rate",
        "tritonwatch_canary_latency_seconds",
        "tritonwatch_canary_time_to_first_token_seconds",
        "tritonwatch_canary_inter_token_latency_seconds",
        "tritonwatch_canary_send_lateness_seconds",
        "tritonwatch_canary_client_errors_total",
        "tritonwatch_model_latency_breakdown_ratio",
        "tritonwatch_model_server_latency_seconds",
        "tritonwatch_model_config_max_batch_size",
        "tritonwatch_model_config_dynamic_batching_enabled",
    }
)
"""Families exported only at ``full``: Prometheus computes them from what ``standard``
keeps (burn rates from the SLI counters, ratios from seconds), or they repeat another
family (client errors are an outcome; the server's mean time is the sum of its stages)."""

BREAKDOWN_LABELS = {
    "tritonwatch_canary_requests_total": "outcome",
    "tritonwatch_model_failures_per_second": "reason",
    "tritonwatch_model_batch_executions_per_second": "batch_size",
}
"""Families whose zero-valued series are left out below ``full``, by the label that
breaks them down."""
ALWAYS_KEPT = {("tritonwatch_canary_requests_total", "success")}
"""Breakdown series kept at 0 all the same: a canary that has not succeeded yet."""

WINDOWED_FAMILIES = frozenset(
    {"tritonwatch_latency_quantile_seconds", "tritonwatch_canary_stream_quantile_seconds"}
)
DROPPED_WINDOW = "1m"
"""The canary's quantile window left out below ``full``; the 5-minute one stays: at one
canary request a second it holds 300 samples, enough for a p99."""


def exposed_name(family: Metric) -> str:
    """The family's name as Prometheus stores it (a counter's ``_total``, an info's ``_info``)."""
    suffix = {"counter": "_total", "info": "_info"}.get(family.type, "")
    return f"{family.name}{suffix}"


def family_detail(name: str) -> Detail:
    """The lowest level that exports the family ``name`` (its exposed name)."""
    if name in MINIMAL_FAMILIES or not name.startswith("tritonwatch_"):
        return Detail.MINIMAL
    if name in FULL_FAMILIES:
        return Detail.FULL
    return Detail.STANDARD


def at_level(family: Metric, level: Detail) -> Metric | None:
    """``family`` as ``/metrics`` shows it at ``level``: itself, a copy without the
    samples that level leaves out, or None when the level leaves the family out."""
    name = exposed_name(family)
    if family_detail(name).rank > level.rank:
        return None
    if level == Detail.FULL:
        return family
    label = BREAKDOWN_LABELS.get(name)
    if label is not None:
        return _keep(family, lambda s: s.value != 0 or (name, s.labels.get(label)) in ALWAYS_KEPT)
    if name in WINDOWED_FAMILIES:
        return _keep(
            family,
            lambda s: (
                s.labels.get("window") != DROPPED_WINDOW or s.labels.get("source") == "server"
            ),
        )
    return family


def _keep(family: Metric, wanted: Callable[..., bool]) -> Metric:
    kept = Metric(family.name, family.documentation, family.type, family.unit)
    kept.samples = [sample for sample in family.samples if wanted(sample)]
    return kept


class DetailRegistry(CollectorRegistry):
    """A view of ``source`` at the level ``detail()`` names when it is collected (a
    config reload changes it at the next scrape); ``source`` itself keeps everything
    (the status page and the reference read it)."""

    def __init__(self, source: CollectorRegistry, detail: Callable[[], Detail]) -> None:
        super().__init__(auto_describe=False)
        self._source = source
        self._detail = detail

    def collect(self) -> Iterator[Metric]:
        level = self._detail()
        for family in self._source.collect():
            shown = at_level(family, level)
            if shown is not None:
                yield shown

    def restricted_registry(self, names: Iterable[str]) -> _Restricted:  # type: ignore[override]
        """The view's samples named in ``names`` (``/metrics?name[]=…``)."""
        return _Restricted(self, frozenset(names))


class _Restricted:
    def __init__(self, view: DetailRegistry, names: frozenset[str]) -> None:
        self._view = view
        self._names = names

    def collect(self) -> Iterator[Metric]:
        for family in self._view.collect():
            kept = _keep(family, lambda s: s.name in self._names)
            if kept.samples:
                yield kept
