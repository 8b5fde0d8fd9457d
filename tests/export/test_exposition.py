"""The fast /metrics renderer: byte for byte what prometheus_client writes, in both formats.

Every comparison renders the same collected families through ours and through
prometheus_client's own ``generate_latest`` (text 0.0.4) or OpenMetrics
``generate_latest``, so a single differing byte fails.
"""

from __future__ import annotations

import gzip
import http.client
import math
from collections.abc import Iterable
from wsgiref.types import WSGIApplication

import pytest
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Enum,
    Gauge,
    Histogram,
    Info,
    Summary,
    generate_latest,
    make_wsgi_app,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    Metric,
    UnknownMetricFamily,
)
from prometheus_client.openmetrics import exposition as om_format
from prometheus_client.samples import Exemplar

from support import assert_promtool_clean
from tritonwatch.common.listen import ListenAddress
from tritonwatch.export.exposition import Renderer, go_float, make_metrics_app
from tritonwatch.export.http_server import ExporterServer, HealthReport, exporter_app

pytestmark = pytest.mark.real

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
"""Prometheus 3.x's Accept header at its default ``scrape_protocols``."""
PROMETHEUS_2_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
AWKWARD_VALUES = [
    0.0, -0.0, 1.0, -1.0, 42, 7, True, 0.1, 1e-300, 5e-324, 1e22, 1.7976931348623157e308,
    123456.7, 1234567.0, 12345678.9, -12345678.9, 1e6, 1e7, 0.000123, 1 / 3,
    math.inf, -math.inf, math.nan,
]  # fmt: skip
AWKWARD_LABELS = ["back\\slash", 'quote"d', "new\nline", "ünïcødé ✓", "", "a,b=c}{"]


class Fixed:
    """A collector answering the families it was given, as they are."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self.families


def awkward_families() -> list[Metric]:
    """Every family type and value shape the renderer must write as the library does."""
    gauge = GaugeMetricFamily(
        "tw_awkward_values", 'Help with a \\ backslash,\na newline and a "quote".', labels=["i"]
    )
    for index, value in enumerate(AWKWARD_VALUES):
        gauge.add_metric([str(index)], value)
    labelled = GaugeMetricFamily("tw_awkward_labels", "Label values to escape.", labels=["v", "w"])
    for index, value in enumerate(AWKWARD_LABELS):
        labelled.add_metric([value, str(index)], index)
    counter = CounterMetricFamily("tw_jobs", "A counter with created.", labels=["k"], created=5.5)
    counter.add_metric(["a"], 3, created=1700000000.25)
    unit = GaugeMetricFamily("tw_size_bytes", "A gauge with a unit.", unit="bytes", value=2048)
    unknown = UnknownMetricFamily("tw_mystery", "Untyped.", value=1.5)
    gauge_histogram = GaugeHistogramMetricFamily(
        "tw_queue", "A gauge histogram.", buckets=[("1.0", 2), ("+Inf", 3)], gsum_value=4.5
    )
    empty = GaugeMetricFamily("tw_nothing_yet", "No samples yet.", labels=["model"])
    colon = GaugeMetricFamily("tw:recorded", "A name with a colon: the library's.", value=1)
    stamped = GaugeMetricFamily("tw_stamped", "A sample with a timestamp.", labels=["t"])
    stamped.add_metric(["x"], 1.0, timestamp=1700000000.5)
    exemplified = CounterMetricFamily("tw_exemplified", "A counter sample with an exemplar.")
    exemplified.add_sample(
        "tw_exemplified_total", {}, 2.0, exemplar=Exemplar({"trace_id": "abc"}, 1.0)
    )
    odd_label = GaugeMetricFamily("tw_odd_label", "A label name starting with __.")
    odd_label.add_sample("tw_odd_label", {"__weird": "1", "ok": "2"}, 1.0)
    return [
        gauge, labelled, counter, unit, unknown, gauge_histogram, empty, colon, stamped,
        exemplified, odd_label,
    ]  # fmt: skip


def library_metrics_registry() -> CollectorRegistry:
    """prometheus_client's own metric classes, as the daemon's registry may hold them."""
    registry = CollectorRegistry()
    Counter("tw_requests", "Requests.", ["model"], registry=registry).labels("a").inc(3)
    Gauge("tw_temperature", "A gauge.", registry=registry).set(-3.25)
    histogram = Histogram("tw_latency_seconds", "Latency.", ["model"], registry=registry)
    for value in (0.003, 0.2, 7.0, 100.0):
        histogram.labels('we"ird\\model').observe(value)
    Summary("tw_lateness_seconds", "A summary.", registry=registry).observe(0.25)
    Info("tw_build", "Build facts.", registry=registry).info({"version": "1.2.3", "go": "no"})
    Enum("tw_state", "A state set.", states=["a", "b"], registry=registry).state("b")
    return registry


def assert_renders_as_library(families: list[Metric], renderer: Renderer | None = None) -> None:
    """Ours equals the library in text 0.0.4, OpenMetrics and OpenMetrics allow-utf-8."""
    renderer = renderer or Renderer()
    fixed = Fixed(families)
    for _ in range(2):  # the second render reads every prefix from the cache
        assert renderer.render(families, openmetrics=False) == generate_latest(fixed)
        assert renderer.render(families, openmetrics=True) == om_format.generate_latest(fixed)
        allow = om_format.ALLOWUTF8
        assert renderer.render(
            families, openmetrics=True, escaping=allow
        ) == om_format.generate_latest(fixed, escaping=allow)
        assert renderer.render(families, openmetrics=False, escaping=allow) == generate_latest(
            fixed, escaping=allow
        )


def test_awkward_families_render_byte_identical() -> None:
    """Breaks on any difference in escaping, float text, headers, units or fallbacks."""
    assert_renders_as_library(awkward_families())


def test_library_metric_classes_render_byte_identical() -> None:
    """Breaks if _created/_total/_info/stateset munging or bucket text differs."""
    assert_renders_as_library(list(library_metrics_registry().collect()))


def test_go_float_matches_prometheus_client() -> None:
    """Breaks if a value's text differs from floatToGoString's."""
    from prometheus_client.utils import floatToGoString

    values = [*AWKWARD_VALUES, 9999999.0, 1e16, 123456789012345678.0, 2.5e-7, -1e22]
    assert [go_float(value) for value in values] == [floatToGoString(v) for v in values]


def test_series_that_disappear_are_forgotten_and_changes_rendered() -> None:
    """Breaks if the prefix cache serves a stale value or keeps removed series forever."""
    renderer = Renderer()
    gauge = GaugeMetricFamily("tw_g", "G.", labels=["model"])
    for model in ("a", "b", "c"):
        gauge.add_metric([model], 1.0)
    assert_renders_as_library([gauge], renderer)
    assert len(renderer._series) == 3
    smaller = GaugeMetricFamily("tw_g", "G.", labels=["model"])
    smaller.add_metric(["b"], 2.0)
    assert_renders_as_library([smaller], renderer)
    assert len(renderer._series) == 1


def test_promtool_accepts_the_text_format() -> None:
    """Breaks if the 0.0.4 text of the library metric classes is not valid exposition."""
    text = Renderer().render(library_metrics_registry().collect(), openmetrics=False)
    assert_promtool_clean(text.decode())


def _call(app: WSGIApplication, **environ: str) -> tuple[str, dict[str, str], bytes]:
    answer: dict[str, object] = {}

    def start_response(status: str, headers: list[tuple[str, str]], *_: object) -> None:
        answer.update(status=status, headers=dict(headers))

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": "", **environ}
    body = b"".join(app(environ, start_response))
    return str(answer["status"]), dict(answer["headers"]), body  # type: ignore[call-overload]


@pytest.mark.parametrize(
    "environ",
    [
        {"HTTP_ACCEPT": PROMETHEUS_ACCEPT},
        {"HTTP_ACCEPT": PROMETHEUS_2_ACCEPT},
        {"HTTP_ACCEPT": "text/plain;version=0.0.4"},
        {"HTTP_ACCEPT": "text/plain;version=1.0.0;escaping=allow-utf-8"},
        {"HTTP_ACCEPT": "application/openmetrics-text;version=1.0.0;escaping=dots"},
        {},
        {"REQUEST_METHOD": "HEAD"},
        {"REQUEST_METHOD": "OPTIONS"},
        {"REQUEST_METHOD": "POST"},
        {"QUERY_STRING": "name[]=tw_temperature&name[]=tw_requests_total"},
    ],
    ids=lambda environ: ",".join(f"{k}={v[:40]}" for k, v in environ.items()) or "bare",
)
def test_app_answers_as_make_wsgi_app(environ: dict[str, str]) -> None:
    """Breaks if status, headers or body differ from make_wsgi_app for any request."""
    registry = library_metrics_registry()
    registry.register(Fixed(awkward_families()))
    ours, theirs = make_metrics_app(registry), make_wsgi_app(registry)
    assert _call(ours, **environ) == _call(theirs, **environ)


def test_gzip_answer_is_the_same_body() -> None:
    """Breaks if the gzip body is not valid gzip of exactly the uncompressed answer."""
    registry = library_metrics_registry()
    app = make_metrics_app(registry)
    status, headers, body = _call(app, HTTP_ACCEPT=PROMETHEUS_ACCEPT, HTTP_ACCEPT_ENCODING="gzip")
    assert (status, headers["Content-Encoding"]) == ("200 OK", "gzip")
    assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert gzip.decompress(body) == om_format.generate_latest(
        registry, escaping=om_format.ALLOWUTF8
    )


def test_real_exporter_answers_prometheus_scrape() -> None:
    """Breaks if a Prometheus-style scrape over HTTP gets other bytes than the library's."""
    registry = library_metrics_registry()
    registry.register(Fixed(awkward_families()))
    server = ExporterServer(
        ListenAddress("127.0.0.1", 0), exporter_app(registry, lambda: HealthReport(True))
    )
    server.start()
    try:
        connection = http.client.HTTPConnection(server.address.host, server.address.port)
        headers = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}
        connection.request("GET", "/metrics", headers=headers)
        response = connection.getresponse()
        body = response.read()
        connection.close()
    finally:
        server.stop()
    assert response.status == 200
    assert response.getheader("Content-Type") == (
        "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=allow-utf-8"
    )
    assert response.getheader("Content-Encoding") == "gzip"
    expected = om_format.generate_latest(registry, escaping=om_format.ALLOWUTF8)
    assert gzip.decompress(body) == expected
