"""Reads Triton's ``/metrics`` text into a :class:`~tritonwatch.records.observations.TritonScrape`.

Why not ``prometheus_client.parser``: it walks every label character in Python and
builds a family object per line. This parser cuts each line with a few string
operations (Triton's own ``name{labels} value`` shape has a fast path) and parses
each distinct label text once per page, since Triton repeats ``model="m",version="1"``
on a dozen families: several times faster on a 500-model page (benchmarks/RESULTS.md,
§2: Triton /metrics parsing), which matters when one daemon scrapes a fleet.

It follows the text exposition format 0.0.4 as Prometheus reads it: ``# HELP`` /
``# TYPE`` and other comments, blank lines, ``name{label="value",...} value
[timestamp]``, escapes ``\\\\``, ``\\"`` and ``\\n`` in label values, ``NaN``/``Nan``
and ``±Inf``. A line it cannot read is counted in ``bad_lines`` and skipped; the page
as a whole never fails. Only input that is not text at all raises
:class:`MetricsTextError`.
"""

from __future__ import annotations

import math
import re
from types import MappingProxyType

from tritonwatch.records.observations import (
    ModelCounters,
    ModelKey,
    RawSeries,
    TritonHistogram,
    TritonScrape,
    TritonSummary,
)
from tritonwatch.scrape.llm_families import LLM_FAMILIES, Aggregate, LlmFamily
from tritonwatch.scrape.triton_families import (
    FAMILIES,
    REQUEST_FAILURE,
    UNKNOWN_FAILURE_REASON,
    Kind,
    Scope,
    TritonFamily,
)


class MetricsTextError(ValueError):
    """The input is not text (not ``str``, or bytes that are not UTF-8)."""


class _Role:
    """What a series name means: its family, and which part of the family the line is.

    An LLM family's counter or gauge line is part ``_LLM`` rather than ``_VALUE``, so the
    plain Triton lines (most of a page) keep their one-comparison path in
    :meth:`_Page.fold`; ``split_label`` and ``takes_max`` say how it is filed.
    """

    __slots__ = (
        "is_failure",
        "is_gauge",
        "is_summary",
        "name",
        "part",
        "scope",
        "split_label",
        "takes_max",
    )

    def __init__(self, family: TritonFamily | LlmFamily, part: int) -> None:
        self.scope = family.scope
        self.name = family.name
        self.part = part
        self.is_failure = family.name == REQUEST_FAILURE
        self.is_gauge = family.kind is Kind.GAUGE
        self.is_summary = family.kind is Kind.SUMMARY
        llm = family if isinstance(family, LlmFamily) else None
        self.split_label = llm.split_label if llm is not None else None
        self.takes_max = llm is not None and llm.aggregate is Aggregate.MAX


_VALUE, _QUANTILE, _BUCKET, _SUM, _COUNT, _LLM = range(6)


def _series_roles(families: tuple[TritonFamily | LlmFamily, ...]) -> dict[str, _Role]:
    roles: dict[str, _Role] = {}
    for family in families:
        if family.kind is Kind.SUMMARY:
            names = {family.name: _QUANTILE}
        elif family.kind is Kind.HISTOGRAM:
            names = {f"{family.name}_bucket": _BUCKET}
        elif isinstance(family, LlmFamily):
            names = {family.name: _LLM}
        else:
            names = {family.name: _VALUE}
        if family.kind in (Kind.SUMMARY, Kind.HISTOGRAM):
            names |= {f"{family.name}_sum": _SUM, f"{family.name}_count": _COUNT}
        for name, part in names.items():
            if name in roles:
                raise RuntimeError(f"series name {name} belongs to two families")
            roles[name] = _Role(family, part)
    return roles


_ROLES = _series_roles((*FAMILIES, *LLM_FAMILIES))
_MODEL, _GPU = Scope.MODEL, Scope.GPU
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# One `name="value"` pair and its separator. The value pattern is the "unrolled loop"
# form: faster in `re` than the alternation `(?:[^"\\]|\\.)*`.
_LABEL = re.compile(
    r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"([^"\\\n]*(?:\\.[^"\\\n]*)*)"[ \t]*(?:,|\Z)'
)
_TIMESTAMP = re.compile(r"-?[0-9]+")
_ESCAPE = re.compile(r"\\(.)")
_UNESCAPED = {"\\": "\\", '"': '"', "n": "\n"}


def _unescape(match: re.Match[str]) -> str:
    try:
        return _UNESCAPED[match.group(1)]
    except KeyError:
        raise ValueError(f"invalid escape {match.group(0)!r}") from None


def parse_labels(text: str) -> dict[str, str]:
    """``model="m",version="1"`` → ``{"model": "m", "version": "1"}``.

    Raises:
        ValueError: the label set is malformed (bad name, unquoted or badly escaped
            value, a repeated name, junk between pairs).
    """
    labels: dict[str, str] = {}
    text = text.strip(" \t")
    position, end = 0, len(text)
    while position < end:
        match = _LABEL.match(text, position)
        if match is None:
            raise ValueError(f"malformed label set at offset {position}")
        name, value = match.group(1, 2)
        if "\\" in value:
            value = _ESCAPE.sub(_unescape, value)
        if name in labels:
            raise ValueError(f"label {name} repeated")
        labels[name] = value
        position = match.end()
    return labels


def parse_number(token: str) -> float:
    """A sample value as Prometheus' Go parser reads it (``Nan``, ``+Inf`` …), strictly.

    Python's ``float`` also takes ``1_000`` and non-ASCII digits; Prometheus does not.
    """
    if "_" in token or not token.isascii():
        raise ValueError(f"not a number: {token!r}")
    return float(token)


def _bound(text: str | None) -> float | None:
    """A ``quantile`` or ``le`` label value; None when absent or not a number."""
    if text is None:
        return None
    try:
        bound = parse_number(text)
    except ValueError:
        return None
    return None if math.isnan(bound) else bound


def _upper_quantile(old: float | None, new: float) -> float:
    """Two splits of one model (``gpu_uuid``) cannot merge quantiles; the larger one
    is an upper bound of the merged quantile, which is the safe side for latency."""
    if old is None or math.isnan(old):
        return new
    if math.isnan(new):
        return old
    return max(old, new)


class _Distribution:
    """A summary's quantiles or a histogram's buckets, with ``_sum`` and ``_count``."""

    __slots__ = ("count", "points", "sum")

    def __init__(self) -> None:
        self.points: dict[float, float] = {}
        self.sum: float | None = None
        self.count: float | None = None

    def add(self, part: int, point: float | None, value: float) -> bool:
        """Adds one line; False when a quantile or bucket line lacks its bound."""
        if part == _SUM:
            self.sum = (self.sum or 0.0) + value
        elif part == _COUNT:
            self.count = (self.count or 0.0) + value
        elif point is None:
            return False
        elif part == _QUANTILE:
            self.points[point] = _upper_quantile(self.points.get(point), value)
        else:
            self.points[point] = self.points.get(point, 0.0) + value
        return True


class _ModelAccumulator:
    """Mutable per-model state while one page is folded; frozen by :meth:`freeze`."""

    __slots__ = ("counters", "failures", "gauges", "histograms", "llm", "summaries")

    def __init__(self) -> None:
        self.counters: dict[str, float] = {}
        self.gauges: dict[str, float] = {}
        self.failures: dict[str, float] = {}
        self.summaries: dict[str, _Distribution] = {}
        self.histograms: dict[str, _Distribution] = {}
        self.llm: dict[tuple[str, str], float] = {}

    def add_failure(self, reason: str, value: float) -> None:
        self.failures[reason] = self.failures.get(reason, 0.0) + value

    def add_llm(self, role: _Role, labels: dict[str, str], value: float) -> None:
        """Files an LLM gauge or counter under (family, split value): summed over the
        other labels (``engine``, ``gpu_uuid``), or their maximum for a usage ratio.

        A split value the table does not list (a newer backend's) is kept as it is."""
        split = labels.get(role.split_label, "") if role.split_label is not None else ""
        key = (role.name, split)
        old = self.llm.get(key)
        if old is None:
            self.llm[key] = value
        elif role.takes_max:
            self.llm[key] = max(old, value)
        else:
            self.llm[key] = old + value

    def add_part(
        self, role: _Role, labels: dict[str, str], value: float, point: float | None
    ) -> bool:
        """Adds a line that is not a plain Triton counter or gauge: an LLM family's value,
        or a summary or histogram line; False when the line cannot be used."""
        if role.part == _LLM:
            self.add_llm(role, labels, value)
            return True
        return self.add_distribution(role, value, point)

    def add_distribution(self, role: _Role, value: float, point: float | None) -> bool:
        """Adds one summary or histogram line; False when a quantile or bucket line
        lacks its bound (``point``: the ``quantile`` or ``le`` label's value)."""
        distributions = self.summaries if role.is_summary else self.histograms
        distribution = distributions.get(role.name)
        if distribution is None:
            distribution = distributions[role.name] = _Distribution()
        return distribution.add(role.part, point, value)

    def freeze(self, key: ModelKey) -> ModelCounters:
        summaries = {
            name: TritonSummary(MappingProxyType(dict(sorted(d.points.items()))), d.sum, d.count)
            for name, d in self.summaries.items()
        }
        histograms = {
            name: TritonHistogram(tuple(sorted(d.points.items())), d.sum, d.count)
            for name, d in self.histograms.items()
        }
        return ModelCounters(
            model=key.model,
            version=key.version,
            counters=MappingProxyType(self.counters),
            gauges=MappingProxyType(self.gauges),
            failures_by_reason=MappingProxyType(self.failures),
            summaries=MappingProxyType(summaries),
            histograms=MappingProxyType(histograms),
            llm=MappingProxyType(self.llm),
        )


def _as_text(page: str | bytes) -> str:
    if isinstance(page, str):
        return page
    if isinstance(page, bytes | bytearray | memoryview):
        try:
            return bytes(page).decode("utf-8")
        except UnicodeDecodeError as error:
            raise MetricsTextError(f"metrics page is not UTF-8 text: {error}") from None
    raise MetricsTextError(f"metrics page must be str or bytes, got {type(page).__name__}")


def _split_line(line: str) -> tuple[str, str, str] | None:
    """The general reading of a line: ``(name, label text, value token)``, or None
    for a blank or comment line.

    Accepts what Prometheus accepts beyond Triton's own shape: blanks around the
    name, label set and value, a trailing timestamp (validated, then unused: Triton
    prints none).

    Raises:
        ValueError: the line is not a sample line.
    """
    line = line.strip(" \t\r")
    if not line or line[0] == "#":
        return None
    brace = line.find("{")
    if brace > 0:
        name = line[:brace].rstrip(" \t")
        close = line.rfind("}")
        if close < brace:
            raise ValueError("unclosed label set")
        label_text = line[brace + 1 : close]
        fields = line[close + 1 :].split()
    else:
        name, *fields = line.split()
        label_text = ""
    if not 1 <= len(fields) <= 2:
        raise ValueError("expected a value and an optional timestamp")
    if len(fields) == 2 and _TIMESTAMP.fullmatch(fields[1]) is None:
        raise ValueError("bad timestamp")
    if _NAME.fullmatch(name) is None:
        raise ValueError("bad metric name")
    return name, label_text, fields[0]


def _read_lines(text: str) -> tuple[dict[str, dict[str, float]], int]:
    """First pass: every sample as label text → series name → value, and the bad lines.

    Labels are not parsed here: a page repeats a few hundred distinct label texts over
    tens of thousands of lines, and the second pass parses each once.
    """
    by_label_text: dict[str, dict[str, float]] = {}
    bad_lines = 0
    for line in text.split("\n"):
        if not line or line[0] == "#":
            continue
        try:
            # Fast path for Triton's own shape, `name{labels} value`; anything else
            # (timestamps, odd blanks, names not in the table) takes the general path.
            head, _, token = line.rpartition(" ")
            if head[-1:] == "}" and (brace := head.find("{")) > 0:
                name, label_text = head[:brace], head[brace + 1 : -1]
            else:
                name, label_text = head, ""
            if not token or name not in _ROLES:
                split = _split_line(line)
                if split is None:
                    continue  # a blank line, or a comment after blanks
                name, label_text, token = split
            value = parse_number(token)
        except ValueError:
            bad_lines += 1
            continue
        series = by_label_text.get(label_text)
        if series is None:
            by_label_text[label_text] = {name: value}
        elif name in series:
            bad_lines += 1  # the same series twice: keep the first
        else:
            series[name] = value
    return by_label_text, bad_lines


class _Page:
    """The second pass: files each sample under its model, GPU or the server."""

    def __init__(self, keep_unknown: bool) -> None:
        self.keep_unknown = keep_unknown
        self.models: dict[ModelKey, _ModelAccumulator] = {}
        self.gpus: dict[str, dict[str, float]] = {}
        self.server: dict[str, float] = {}
        self.unknown_names: set[str] = set()
        self.unknown_series: list[RawSeries] = []

    def fold(self, labels: dict[str, str], series: dict[str, float]) -> int:
        """Files the samples that share one label set; returns how many were unusable."""
        unusable = 0
        accumulator = None
        reason = labels.get("reason", UNKNOWN_FAILURE_REASON)
        point = _bound(labels.get("quantile") or labels.get("le"))
        for name, value in series.items():
            role = _ROLES.get(name)
            if role is None:
                self.add_unknown(name, labels, value)
            elif role.scope is _MODEL:
                if accumulator is None:
                    accumulator = self.model(labels)
                if accumulator is None:
                    unusable += 1
                elif role.part == _VALUE:  # inline: most samples are plain counters and gauges
                    table = accumulator.gauges if role.is_gauge else accumulator.counters
                    table[name] = table.get(name, 0.0) + value
                    if role.is_failure:
                        accumulator.add_failure(reason, value)
                elif not accumulator.add_part(role, labels, value, point):
                    unusable += 1
            elif role.scope is _GPU:
                uuid = labels.get("gpu_uuid")
                if uuid is None:
                    unusable += 1
                else:
                    self.gpus.setdefault(uuid, {})[name] = value
            else:
                self.server[name] = self.server.get(name, 0.0) + value
        return unusable

    def model(self, labels: dict[str, str]) -> _ModelAccumulator | None:
        """The accumulator of the labels' (model, version); None without a model label.

        vLLM's own server labels its series ``model_name`` (its served model name) and has
        no versions, so that label stands in for ``model`` with version ""."""
        model = labels.get("model")
        if model is not None:
            key = ModelKey(model, labels.get("version", ""))
        elif (served := labels.get("model_name")) is not None:
            key = ModelKey(served, "")
        else:
            return None
        accumulator = self.models.get(key)
        if accumulator is None:
            accumulator = self.models[key] = _ModelAccumulator()
        return accumulator

    def add_unknown(self, name: str, labels: dict[str, str], value: float) -> None:
        self.unknown_names.add(name)
        if self.keep_unknown:
            self.unknown_series.append(RawSeries(name, tuple(sorted(labels.items())), value))


def parse_triton_metrics(
    page: str | bytes, at: float, *, keep_unknown: bool = False
) -> TritonScrape:
    """Parses one Triton ``/metrics`` page.

    Args:
        page: the response body (``str``, or UTF-8 ``bytes``).
        at: the caller's monotonic time of the scrape, carried into the record.
        keep_unknown: also keep samples of families not in
            :data:`~tritonwatch.scrape.triton_families.FAMILIES` as :class:`RawSeries`.

    Returns:
        The immutable scrape record; unreadable lines are counted in ``bad_lines``.

    Raises:
        MetricsTextError: ``page`` is not text.
    """
    by_label_text, bad_lines = _read_lines(_as_text(page))
    folded = _Page(keep_unknown)
    samples = 0
    for label_text, series in by_label_text.items():
        try:
            labels = parse_labels(label_text) if label_text else {}
        except ValueError:
            bad_lines += len(series)
            continue
        unusable = folded.fold(labels, series)
        bad_lines += unusable
        samples += len(series) - unusable
    return TritonScrape(
        at=at,
        models=MappingProxyType({key: acc.freeze(key) for key, acc in folded.models.items()}),
        gpus=MappingProxyType({uuid: MappingProxyType(v) for uuid, v in folded.gpus.items()}),
        server=MappingProxyType(folded.server),
        samples=samples,
        bad_lines=bad_lines,
        unknown_families=frozenset(folded.unknown_names),
        unknown_series=tuple(folded.unknown_series),
    )
