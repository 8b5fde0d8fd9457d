"""The /metrics renderer held to prometheus_client by hypothesis: any float, any label
value, every family type, both formats and both fast escapings.

The examples are random families as a collector may build them — counters (with and
without ``_created``), gauges, summaries, histograms, gauge histograms, infos, state
sets and unknowns, units or none, help text with backslashes and newlines, label values
of any Unicode — and each is rendered twice by one renderer (the second time every
series prefix comes from its cache) and compared byte for byte with the library.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
    SummaryMetricFamily,
    UnknownMetricFamily,
)
from prometheus_client.utils import floatToGoString
from test_exposition import assert_renders_as_library

from tritonwatch.export.exposition import Renderer, go_float

EXAMPLES = settings(max_examples=100, derandomize=True, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
"""Fixed examples, so the suite is the same on every run and host."""

_FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=1e9, max_value=1e17),  # where Go's %g and Python's repr part
    st.integers(-(2**63), 2**63).map(float),
    st.sampled_from([1.50754820096e11, 1e10, 9_999_999.0, 1e16, 5e-324, -0.0]),
)
_COUNTS = st.one_of(st.floats(min_value=0, max_value=1e18), st.integers(0, 2**53).map(float))
_NAME = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,15}", fullmatch=True).filter(
    lambda n: "__" not in n
)
_LABEL = st.from_regex(r"[a-zA-Z][a-zA-Z0-9_]{0,10}", fullmatch=True).filter(
    lambda n: n not in {"le", "quantile"}
)
_VALUE = st.text(max_size=20)
_HELP = st.text(max_size=40)


@st.composite
def _labels(draw: st.DrawFn) -> tuple[list[str], list[list[str]]]:
    """Label names and the values of 0–3 series."""
    names = draw(st.lists(_LABEL, unique=True, max_size=3))
    series = draw(st.lists(st.lists(_VALUE, min_size=len(names), max_size=len(names)),
                           min_size=1, max_size=3))  # fmt: skip
    return names, series


def _unique(series: list[list[str]]) -> list[list[str]]:
    return [list(values) for values in dict.fromkeys(tuple(values) for values in series)]


@st.composite
def families(draw: st.DrawFn) -> Metric:
    kind = draw(st.sampled_from(["counter", "gauge", "summary", "histogram", "gaugehistogram",
                                 "info", "stateset", "unknown"]))  # fmt: skip
    name = f"tw_{draw(_NAME)}"
    text = draw(_HELP)
    names, series = draw(_labels())
    series = _unique(series)
    unit = draw(st.sampled_from(["", "seconds", "bytes"])) if kind in {"gauge", "counter"} else ""
    if unit:
        name = f"{name}_{unit}"
    if kind == "counter":
        family: Metric = CounterMetricFamily(name, text, labels=names, unit=unit)
        for values in series:
            created = draw(st.none() | st.floats(min_value=0, max_value=2e9))
            family.add_metric(values, draw(_COUNTS), created=created)  # type: ignore[attr-defined]
    elif kind == "gauge":
        family = GaugeMetricFamily(name, text, labels=names, unit=unit)
        for values in series:
            family.add_metric(values, draw(_FLOATS))  # type: ignore[attr-defined]
    elif kind == "unknown":
        family = UnknownMetricFamily(name, text, labels=names)
        for values in series:
            family.add_metric(values, draw(_FLOATS))  # type: ignore[attr-defined]
    elif kind == "summary":
        family = SummaryMetricFamily(name, text, labels=names)
        for values in series:
            family.add_metric(values, draw(_COUNTS), draw(_COUNTS))  # type: ignore[attr-defined]
    elif kind in {"histogram", "gaugehistogram"}:
        family = _histogram(draw, kind, name, text, names, series)
    elif kind == "info":
        family = InfoMetricFamily(name, text, labels=names)
        for values in series:
            info = draw(
                st.dictionaries(_LABEL.filter(lambda n: n not in names), _VALUE, max_size=2)
            )
            family.add_metric(values, info)  # type: ignore[attr-defined]
    else:
        family = StateSetMetricFamily(name, text, labels=names)
        for values in series:
            states = draw(st.dictionaries(_LABEL.filter(lambda n: n not in names), st.booleans(),
                                          min_size=1, max_size=3))  # fmt: skip
            family.add_metric(values, states)  # type: ignore[attr-defined]
    return family


def _histogram(
    draw: st.DrawFn, kind: str, name: str, text: str, names: list[str], series: list[list[str]]
) -> Metric:
    family: Metric = (
        HistogramMetricFamily(name, text, labels=names)
        if kind == "histogram"
        else GaugeHistogramMetricFamily(name, text, labels=names)
    )
    for values in series:
        bounds = sorted(set(draw(st.lists(st.floats(-1e6, 1e12), max_size=4))))
        counts = sorted(draw(st.lists(st.integers(0, 10**9), min_size=len(bounds) + 1,
                                      max_size=len(bounds) + 1)))  # fmt: skip
        buckets = [
            (floatToGoString(b), float(c)) for b, c in zip([*bounds, math.inf], counts, strict=True)
        ]
        total = draw(_COUNTS)
        family.add_metric(values, buckets, total)  # type: ignore[attr-defined]
    return family


@EXAMPLES
@given(st.lists(families(), min_size=1, max_size=4, unique_by=lambda f: f.name))
def test_any_families_render_as_prometheus_client_renders_them(families: list[Metric]) -> None:
    """Breaks on any byte that differs from the library: a float's text, an escape, a
    header, a unit, a suffix text 0.0.4 moves out of its family, a cached prefix."""
    assert_renders_as_library(families)


@EXAMPLES
@given(st.lists(families(), min_size=1, max_size=3, unique_by=lambda f: f.name), st.data())
def test_a_renderer_kept_across_changing_scrapes_renders_each_as_the_library(
    first: list[Metric], data: st.DataObject
) -> None:
    """Breaks if a prefix or header cached from one scrape leaks into the next one's
    different families (a series gone, a help text changed)."""
    renderer = Renderer()
    assert_renders_as_library(first, renderer)
    second = data.draw(st.lists(families(), min_size=1, max_size=3, unique_by=lambda f: f.name))
    assert_renders_as_library(second, renderer)


@EXAMPLES
@given(_FLOATS)
def test_go_float_is_float_to_go_string_for_any_float(value: float) -> None:
    """Breaks if a value's text differs from the library's ``floatToGoString``."""
    assert go_float(value) == floatToGoString(value)
