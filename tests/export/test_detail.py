"""The exporter's detail levels (export/detail.py): what each level leaves out of
``/metrics``, that a reload changes the level at the next scrape, that ``name[]``
filtering goes through the level, and the per-model series budget of ``standard``."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from support import sample_value
from tritonwatch.analysis.slo import SLOKind, SLOSpec
from tritonwatch.config.detail import Detail
from tritonwatch.export.canary_metrics import CanaryCollector
from tritonwatch.export.detail import (
    FULL_FAMILIES,
    MINIMAL_FAMILIES,
    DetailRegistry,
    at_level,
    family_detail,
)
from tritonwatch.export.exposition import make_metrics_app
from tritonwatch.export.sli_metrics import SLIEventsCollector
from tritonwatch.records.observations import CanaryResult, Outcome
from tritonwatch.state.canary_board import CanaryBoard, latency_buckets

THRESHOLD = 0.05
SPECS = (
    SLOSpec("t", "m", SLOKind.LATENCY, 0.95, 28 * 86400.0, THRESHOLD),
    SLOSpec("t", "m", SLOKind.AVAILABILITY, 0.999, 28 * 86400.0),
)


class _Families(Collector):
    def __init__(self, *families: Metric) -> None:
        self._families = families

    def collect(self) -> list[Metric]:  # type: ignore[override]
        return list(self._families)


def _outcomes() -> CounterMetricFamily:
    family = CounterMetricFamily("tritonwatch_canary_requests", "r", labels=["model", "outcome"])
    family.add_metric(["m", "success"], 0)
    family.add_metric(["m", "timeout"], 0)
    family.add_metric(["m", "http_error"], 3)
    return family


def _quantiles() -> Metric:
    family = Metric("tritonwatch_latency_quantile_seconds", "q", "summary")
    for window, source in (("1m", "canary"), ("5m", "canary"), ("1m", "server")):
        labels = {"model": "m", "source": source, "window": window}
        family.add_sample(family.name, {**labels, "quantile": "0.95"}, 0.01)
    return family


def _burn() -> GaugeMetricFamily:
    family = GaugeMetricFamily("tritonwatch_slo_burn_rate", "b", labels=["window"])
    family.add_metric(["5m"], 2.0)
    return family


def _labels(family: Metric | None) -> list[dict[str, str]]:
    assert family is not None
    return [dict(sample.labels) for sample in family.samples]


def test_levels_are_ordered_and_every_listed_family_has_one_level() -> None:
    assert [d.rank for d in (Detail.MINIMAL, Detail.STANDARD, Detail.FULL)] == [0, 1, 2]
    assert not MINIMAL_FAMILIES & FULL_FAMILIES
    assert family_detail("tritonwatch_slo_events_total") == Detail.MINIMAL
    assert family_detail("tritonwatch_slo_burn_rate") == Detail.FULL
    assert family_detail("tritonwatch_model_latency_breakdown_seconds") == Detail.STANDARD
    assert family_detail("process_cpu_seconds_total") == Detail.MINIMAL


def test_full_keeps_everything_and_lower_levels_leave_families_out() -> None:
    burn = _burn()
    assert at_level(burn, Detail.FULL) is burn
    assert at_level(burn, Detail.STANDARD) is None
    assert at_level(burn, Detail.MINIMAL) is None
    breakdown = GaugeMetricFamily("tritonwatch_model_latency_breakdown_seconds", "s")
    assert at_level(breakdown, Detail.STANDARD) is breakdown
    assert at_level(breakdown, Detail.MINIMAL) is None


def test_below_full_zero_outcomes_go_but_success_stays() -> None:
    assert len(_labels(at_level(_outcomes(), Detail.FULL))) == 3
    for level in (Detail.STANDARD, Detail.MINIMAL):
        kept = {labels["outcome"] for labels in _labels(at_level(_outcomes(), level))}
        assert kept == {"success", "http_error"}


def test_below_full_the_canarys_one_minute_window_goes_and_the_servers_stays() -> None:
    kept = {(s["source"], s["window"]) for s in _labels(at_level(_quantiles(), Detail.STANDARD))}
    assert kept == {("canary", "5m"), ("server", "1m")}
    assert len(_labels(at_level(_quantiles(), Detail.FULL))) == 3


def _registry(level: Callable[[], Detail]) -> DetailRegistry:
    source = CollectorRegistry()
    source.register(_Families(_outcomes(), _quantiles(), _burn()))
    return DetailRegistry(source, level)


def test_the_view_reads_the_level_at_each_scrape() -> None:
    """A reload that changes exporter.detail shows at the next scrape."""
    level = [Detail.STANDARD]
    view = _registry(lambda: level[0])
    assert "tritonwatch_slo_burn_rate" not in generate_latest(view).decode()
    level[0] = Detail.FULL
    assert sample_value(generate_latest(view).decode(), "tritonwatch_slo_burn_rate") == 2.0


def test_name_filtering_goes_through_the_level() -> None:
    """``/metrics?name[]=…`` (prometheus_client's restricted registry) sees the view."""
    app = make_metrics_app(_registry(lambda: Detail.STANDARD))
    answers: list[str] = []
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/metrics",
        "QUERY_STRING": "name[]=tritonwatch_slo_burn_rate&name[]=tritonwatch_canary_requests_total",
    }
    body = b"".join(app(environ, lambda status, headers: answers.append(status)))  # type: ignore[arg-type]
    text = body.decode()
    assert answers == ["200 OK"]
    assert "tritonwatch_slo_burn_rate" not in text
    assert 'outcome="http_error"' in text
    assert 'outcome="timeout"' not in text


def _board_with_traffic() -> CanaryBoard:
    board = CanaryBoard(latency_buckets([THRESHOLD]))
    board.declare([("t", "m", "http")])
    latencies = [0.01, 0.02, 0.049, 0.05, 0.051, 0.2]
    for at, latency in enumerate(latencies):
        board.record(CanaryResult("t", "m", "http", float(at), Outcome.SUCCESS, latency))
    board.record(CanaryResult("t", "m", "http", 7.0, Outcome.TIMEOUT, 1.0))
    board.record(CanaryResult("t", "m", "http", 8.0, Outcome.CLIENT_ERROR, 0.01))
    return board


def _series_per_model(level: Detail) -> int:
    source = CollectorRegistry()
    board = _board_with_traffic()
    source.register(CanaryCollector(board, clock=lambda: 10.0))
    source.register(SLIEventsCollector(lambda: SPECS, board, clock=lambda: 10.0))
    text = generate_latest(DetailRegistry(source, lambda: level)).decode()
    return len(re.findall(r'^tritonwatch_\w+\{[^}]*model="m"', text, re.MULTILINE))


def test_standard_leaves_the_histogram_and_zero_breakdowns_out() -> None:
    """The canary's share of a model's series: full carries the histogram's 16 series and
    the zero-valued outcomes; standard keeps the outcomes seen and the SLI counters."""
    full, standard = _series_per_model(Detail.FULL), _series_per_model(Detail.STANDARD)
    assert standard <= full - 16 - 5
    assert standard <= 20


@pytest.mark.parametrize("level", list(Detail))
def test_the_sli_counters_are_at_every_level(level: Detail) -> None:
    source = CollectorRegistry()
    board = _board_with_traffic()
    source.register(SLIEventsCollector(lambda: SPECS, board, clock=lambda: 10.0))
    text = generate_latest(DetailRegistry(source, lambda: level)).decode()
    latency = [("model", "m"), ("slo", "latency")]
    availability = [("model", "m"), ("slo", "availability")]
    # 7 timed: four within 50 ms (the bound is inclusive), the 1 s timeout among the bad.
    assert sample_value(text, "tritonwatch_slo_events_total", latency) == 8.0
    assert sample_value(text, "tritonwatch_slo_good_events_total", latency) == 5.0
    # the client error is neither good nor bad
    assert sample_value(text, "tritonwatch_slo_events_total", availability) == 7.0
    assert sample_value(text, "tritonwatch_slo_good_events_total", availability) == 6.0
    assert sample_value(text, "tritonwatch_slo_alert_min_bad_events", latency) == 10.0


def test_below_full_the_canary_collector_does_not_build_what_the_level_drops() -> None:
    """A thousand models' histograms are never built at standard (not built and then
    dropped): the collector asks the level first."""
    board = _board_with_traffic()
    full = {f.name for f in CanaryCollector(board, clock=lambda: 10.0).collect()}
    lean = {
        f.name for f in CanaryCollector(board, clock=lambda: 10.0, full=lambda: False).collect()
    }
    assert full - lean == {
        "tritonwatch_canary_latency_seconds",
        "tritonwatch_canary_send_lateness_seconds",
        "tritonwatch_canary_client_errors",
    }
    assert all(
        family_detail(f"{name}") == Detail.FULL
        for name in full - lean - {"tritonwatch_canary_client_errors"}
    )
