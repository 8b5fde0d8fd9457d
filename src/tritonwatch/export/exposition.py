"""The daemon's ``/metrics`` body at a fraction of prometheus_client's CPU, byte for byte.

prometheus_client renders every sample from scratch on every scrape: it sorts and
escapes each label set character by character and formats each float through
``floatToGoString``. Label sets barely change between scrapes, so this renderer keeps
each series' ``name{labels} `` prefix from the last scrape and only formats the value;
it compresses with zlib level 1 instead of gzip's 9 (still gzip). What that saves is
benchmark 2c in ``benchmarks/RESULTS.md`` (``benchmarks/metrics_exposition.py``).

The output is byte-identical to ``prometheus_client.exposition.generate_latest`` (text
format 0.0.4) and to ``prometheus_client.openmetrics.exposition.generate_latest``
(OpenMetrics 1.0), whichever the client's ``Accept`` header picks by prometheus_client's
own ``choose_encoder``: Prometheus 2.x/3.x ask for OpenMetrics first and keep getting
it, so a scrape stores exactly the series it did before (OpenMetrics carries counters'
``_created`` inline, where text 0.0.4 would add ``*_created`` gauge series). Anything
the fast path does not cover — names outside ``[a-zA-Z_][a-zA-Z0-9_]*``, samples with
timestamps, exemplars or native histograms, escaping schemes other than
``underscores``/``allow-utf-8``, an encoder prometheus_client adds later — is handed,
family by family or whole, to prometheus_client's renderer, so it stays correct.

It copies the library's formatting rules, so it is checked against one minor version
of the library, the one ``pyproject.toml`` pins (0.26): the rules have changed between
minors (``floatToGoString`` wrote ``1.5e+011`` before 0.26 and ``1.5e+11`` since), and
``Sample``'s fields are unpacked here. Moving the pin means running
``tests/export/test_exposition_property.py`` and ``test_exposition_daemon.py`` first.
"""

from __future__ import annotations

import re
import threading
import zlib
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any
from urllib.parse import parse_qs
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from prometheus_client import exposition as text_format
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as om_format
from prometheus_client.registry import Collector

GZIP_LEVEL = 1
"""zlib level of gzip answers: level 1 costs a small part of level 9's CPU (gzip's
default, what make_wsgi_app uses) for a body only a little larger."""

_SIMPLE_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
"""Names every escaping scheme and both formats write unchanged (no ``:``: OpenMetrics
rewrites it in sample names under ``underscores``)."""
_SIMPLE_LABEL = re.compile(r"(?!__)[a-zA-Z_][a-zA-Z0-9_]*")
"""Label names the same: ``__``-prefixed ones are reserved, quoted under ``allow-utf-8``."""
_FAST_ESCAPINGS = frozenset({om_format.UNDERSCORES, om_format.ALLOWUTF8})
_TEXT_SPECIAL_SUFFIXES = ("_created", "_gcount", "_gsum")
"""Samples text 0.0.4 moves out of their family into gauges of their own, in this order."""
_TEXT_TYPES = {
    "info": "gauge",
    "stateset": "gauge",
    "gaugehistogram": "histogram",
    "unknown": "untyped",
}
_GO_SPECIALS = {"inf": "+Inf", "-inf": "-Inf", "nan": "NaN"}
_Key = tuple[str, tuple[tuple[str, str], ...]]


def go_float(value: Any) -> str:
    """``prometheus_client.utils.floatToGoString``, a third cheaper: one ``repr`` and
    one membership test for the common finite value."""
    number = float(value)
    text = repr(number)
    if "n" in text:  # only inf, -inf and nan spell an n
        return _GO_SPECIALS[text]
    dot = text.find(".")
    if dot > 6 and number > 0:  # Go switches to exponents sooner than Python
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _escape_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _prefix(name: str, labels: dict[str, str]) -> str | None:
    """``name{k="v",...} `` as both formats write it, or None when a name is not simple."""
    if _SIMPLE_NAME.fullmatch(name) is None:
        return None
    if not labels:
        return f"{name} "
    pairs = []
    for key, value in sorted(labels.items()):
        if _SIMPLE_LABEL.fullmatch(key) is None:
            return None
        pairs.append(f'{key}="{_escape_value(value)}"')
    return f"{name}{{{','.join(pairs)}}} "


class _One:
    """A collector of one family, to hand that family to prometheus_client's renderer."""

    def __init__(self, family: Metric) -> None:
        self._family = family

    def collect(self) -> Iterable[Metric]:
        return [self._family]


class _Series:
    """One series' rendered prefix (None: not simple, the library renders its family)
    and the number of the last render that wrote it."""

    __slots__ = ("prefix", "seen")

    def __init__(self, prefix: str | None, seen: int) -> None:
        self.prefix = prefix
        self.seen = seen


class Renderer:
    """Renders families in either format, keeping series prefixes between calls.

    The cache is one dict that lives across renders: a hit allocates nothing that
    outlives the lookup, so a scrape leaves the garbage collector's counters where it
    found them (rebuilding the cache every scrape kept ~8 000 fresh tuples alive and
    set off a full collection of the daemon's heap every dozen scrapes, about as costly
    as the rendering itself). Series a render did not write — a model removed — are
    swept at its end, so the cache holds exactly the last scrape's series. Concurrent
    renders are safe: entries are only added or removed under a lock.
    """

    def __init__(self) -> None:
        self._series: dict[_Key, _Series] = {}
        self._headers: dict[tuple[bool, str, str, str, str], str] = {}
        self._renders = 0
        self._lock = threading.Lock()

    def render(
        self,
        families: Iterable[Metric],
        *,
        openmetrics: bool,
        escaping: str = om_format.UNDERSCORES,
        version: str = "1.0.0",
    ) -> bytes:
        """The exposition of ``families``: OpenMetrics (with ``# EOF``) or text 0.0.4.

        Raises:
            ValueError: ``escaping`` is not one the fast path renders (the caller
                hands those to prometheus_client whole).
        """
        if escaping not in _FAST_ESCAPINGS:
            raise ValueError(f"escaping {escaping!r} is not rendered here")
        self._renders += 1
        number = self._renders
        out: list[str] = []
        written = 0
        for family in families:
            count = self._family(family, openmetrics, number, out)
            if count < 0:
                out.append(_library_family(family, openmetrics, escaping, version))
                count = -count - 1
            written += count
        if openmetrics:
            out.append("# EOF\n")
        if len(self._series) > written:
            self._sweep(number)
        return "".join(out).encode()

    def _sweep(self, number: int) -> None:
        """Forgets the series no render since ``number`` wrote."""
        with self._lock:
            stale = [key for key, series in self._series.items() if series.seen < number]
            for key in stale:
                del self._series[key]

    def _family(self, family: Metric, openmetrics: bool, number: int, out: list[str]) -> int:
        """Appends ``family`` to ``out`` and returns how many series it wrote; if the
        family needs the library, ``out`` stays untouched and it returns -1 - the
        series it registered before finding out."""
        cache = self._series
        lines = [self._header(family, openmetrics)]
        special: dict[str, list[str]] = {}
        moved = (
            {}
            if openmetrics
            else {family.name + suffix: suffix for suffix in _TEXT_SPECIAL_SUFFIXES}
        )
        count = 0
        for name, labels, value, timestamp, exemplar, native in family.samples:
            if timestamp is not None or exemplar is not None or native is not None:
                return -1 - count
            key = (name, tuple(labels.items()))
            series = cache.get(key)
            if series is None:
                series = _Series(_prefix(name, labels), number)
                with self._lock:
                    cache[key] = series
            series.seen = number
            count += 1
            prefix = series.prefix
            if prefix is None or value is None:
                return -count - 1
            text = repr(value) if value.__class__ is float else ""
            if not text or text[-1] > "9" or (len(text) > 8 and text.find(".") > 6):
                text = go_float(value)  # not a float, inf/nan, or an exponent for Go
            if moved and name in moved:
                special.setdefault(moved[name], []).append(f"{prefix}{text}\n")
            else:
                lines.append(f"{prefix}{text}\n")
        out.extend(lines)
        for suffix in sorted(special):
            gauge = Metric(family.name + suffix, family.documentation, "gauge")
            out.append(self._header(gauge, openmetrics))
            out.extend(special[suffix])
        return count

    def _header(self, family: Metric, openmetrics: bool) -> str:
        key = (openmetrics, family.name, family.type, family.documentation, family.unit)
        header = self._headers.get(key)
        if header is None:
            header = _om_header(family) if openmetrics else _text_header(family)
            if len(self._headers) > 4096:  # families come and go only with reloads
                self._headers.clear()
            self._headers[key] = header
        return header


def _text_header(family: Metric) -> str:
    name, kind = family.name, family.type
    if kind == "counter":
        name += "_total"
    elif kind == "info":
        name += "_info"
    kind = _TEXT_TYPES.get(kind, kind)
    help_text = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n"


def _om_header(family: Metric) -> str:
    name = family.name
    header = f"# HELP {name} {_escape_value(family.documentation)}\n# TYPE {name} {family.type}\n"
    if family.unit:
        header += f"# UNIT {name} {family.unit}\n"
    return header


def _library_family(family: Metric, openmetrics: bool, escaping: str, version: str) -> str:
    """``family`` as prometheus_client renders it, without OpenMetrics' ``# EOF``."""
    if openmetrics:
        body: bytes = om_format.generate_latest(  # type: ignore[no-untyped-call]
            _One(family), escaping=escaping, version=version
        )
        return body.decode().removesuffix("# EOF\n")
    return text_format.generate_latest(_One(family), escaping=escaping).decode()


Encoder = Callable[[Collector], bytes]


def fast_encoder(renderer: Renderer, library: Encoder) -> Encoder | None:
    """The fast equivalent of an encoder ``choose_encoder`` picked, or None if unknown."""
    if library is text_format.generate_latest:
        return lambda registry: renderer.render(registry.collect(), openmetrics=False)
    if not isinstance(library, partial) or library.args:
        return None
    options = dict(library.keywords)
    escaping = options.pop("escaping", om_format.UNDERSCORES)
    version = options.pop("version", "1.0.0")
    if options or escaping not in _FAST_ESCAPINGS:
        return None
    if library.func is text_format.generate_latest and version == "1.0.0":
        return lambda registry: renderer.render(
            registry.collect(), openmetrics=False, escaping=escaping
        )
    if library.func is om_format.generate_latest:
        return lambda registry: renderer.render(
            registry.collect(), openmetrics=True, escaping=escaping, version=version
        )
    return None


def gzip_body(body: bytes, level: int = GZIP_LEVEL) -> bytes:
    """``body`` as a gzip member (RFC 1952), at zlib ``level``."""
    return zlib.compress(body, level, wbits=31)


def make_metrics_app(registry: Collector) -> WSGIApplication:
    """``prometheus_client.make_wsgi_app(registry)`` with the fast renderer for scrapes.

    A plain GET is rendered here, in the format and with the content type
    prometheus_client's ``choose_encoder`` picks for its ``Accept`` header, and gzipped
    at :data:`GZIP_LEVEL` when ``Accept-Encoding`` allows. Every other request — HEAD,
    OPTIONS, other methods, a ``name[]`` filter, an encoder not known here — goes to
    ``make_wsgi_app`` itself, so it answers exactly as it always did.
    """
    library_app = text_format.make_wsgi_app(registry)
    renderer = Renderer()

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if (
            environ.get("REQUEST_METHOD") != "GET"
            or environ.get("PATH_INFO") == "/favicon.ico"
            or "name[]" in parse_qs(environ.get("QUERY_STRING", ""))
        ):
            body: Iterable[bytes] = library_app(environ, start_response)
            return body
        library, content_type = text_format.choose_encoder(environ.get("HTTP_ACCEPT", ""))
        encoder = fast_encoder(renderer, library)
        if encoder is None:
            body = library_app(environ, start_response)
            return body
        output = encoder(registry)
        headers = [("Content-Type", content_type)]
        if text_format.gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
            output = gzip_body(output)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [output]

    return app
