"""The status page at ``/``: one server-rendered HTML page, no JavaScript, no fonts.

The headline says how many models breach their SLO (:meth:`ModelStatus.breach_reasons`
has the rule). Per target and model: readiness, the canary's p95 over the last hour
against the budget as a sparkline, its quantiles, its last error (the reason, when it
fails), what the client and network add to Triton's own time (:class:`ClientShare`), the
latency breakdown and bottleneck, per SLO the error budget left as a bar and the burn
rates as a chart, active recommendations with their evidence, recent experiment
verdicts, the last sweep's curve, and load against capacity
(:mod:`~tritonwatch.export.status_capacity`). A streaming model's row adds its streaming
canary's TTFT and ITL quantiles and output tokens/s (:class:`StreamStatus`), each
measure beside its own SLO's budget and burn rates when one is set. The charts are inline SVG
(:mod:`tritonwatch.export.status_charts`). The page only reads a :class:`StatusSnapshot`;
the daemon assembles one per request.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape
from typing import TYPE_CHECKING

from tritonwatch import __version__
from tritonwatch.export.status_charts import budget_bar, burn_chart, p95_sparkline, span_text
from tritonwatch.export.status_listing import listing, summary_table
from tritonwatch.export.status_records import (
    STREAM_MEASURES,
    AdviceLine,
    ClientShare,
    ModelStatus,
    SloLine,
    StatusSnapshot,
    StreamStatus,
    VerdictLine,
    format_ms,
    format_ms2,
    format_stream_ms,
)
from tritonwatch.state.canary_board import SKIPPED, LastError

if TYPE_CHECKING:
    from tritonwatch.analysis.serving import NotServing

__all__ = [
    "STREAM_MEASURES",
    "AdviceLine",
    "ClientShare",
    "ModelStatus",
    "SloLine",
    "StatusSnapshot",
    "StreamStatus",
    "VerdictLine",
    "ago",
    "headline",
    "render_status_page",
    "utc_time",
]
"""The page's records are :mod:`~tritonwatch.export.status_records`'; importers may
name them here."""

_STYLE = """
body{font-family:sans-serif;margin:1.5em;color:#222}h1{font-size:1.4em}
section.model{border:1px solid #ccc;border-radius:6px;padding:.8em 1em;margin:1em 0}
table{border-collapse:collapse;margin:.4em 0}td,th{padding:.2em .7em;border-bottom:1px solid #eee;text-align:left}
.ok{color:#1a7f37}.breach{color:#b42318;font-weight:bold}.muted{color:#777}
.badge{display:inline-block;padding:0 .5em;border-radius:4px;background:#eef}
.last-error{background:#fff4f2;border-left:3px solid #b42318;padding:.2em .6em;word-break:break-word}
.verdict{padding:.15em .6em;border-radius:4px}.verdict.breach{background:#ffebe9}.verdict.ok{background:#dafbe1}
figure.p95-history{margin:.5em 0}figure.p95-history svg{display:block}
figcaption{font-size:.85em;color:#555}td svg{vertical-align:middle}td.budget{white-space:nowrap}
dl.evidence{display:grid;grid-template-columns:max-content max-content;gap:0 1em;margin:.2em 0 .4em 1.5em;font-size:.9em}
dl.evidence dt{color:#555}dl.evidence dd{margin:0;font-variant-numeric:tabular-nums}
"""


def _client_share(share: ClientShare | None) -> str:
    """``client end to end X = server Y (queue, compute, other) + client & network Z (N %)``,
    with the exact seconds as data attributes for scripts (and the browser test)."""
    if share is None:
        return (
            '<p class="client-share">client end to end – = server – + client &amp; network – '
            '<span class="muted">(no Triton statistics yet)</span></p>'
        )
    residual, ratio = share.client_network_seconds, share.client_network_ratio
    data = f' data-server-seconds="{share.server_seconds!r}"'
    if share.end_to_end_seconds is not None and residual is not None:
        data += (
            f' data-end-to-end-seconds="{share.end_to_end_seconds!r}"'
            f' data-client-network-seconds="{residual!r}"'
        )
    percent = "" if ratio is None else f" ({ratio:.0%})"
    rest = "client &amp; network"
    if share.streamed:
        rest = "the model's stream"
        note = "decoupled: Triton's time ends when execute() returns; the responses follow"
    elif residual is None:
        note = "no canary requests in the window"
    elif residual < 0:
        note = "as measured: Triton's mean covers every client's requests, not only the canary's"
    else:
        note = "means over the last scrape interval"
    return (
        f'<p class="client-share"{data}>client end to end <b>{format_ms2(share.end_to_end_seconds)}</b>'
        f" = server {format_ms2(share.server_seconds)} (queue {format_ms2(share.queue_seconds)}, compute "
        f"{format_ms2(share.compute_seconds)}, other {format_ms2(share.server_other_seconds)}) + {rest} "
        f'<b class="client-network">{format_ms2(residual)}{percent}</b> '
        f'<span class="muted">({escape(note)})</span></p>'
    )


def utc_time(wall_time: float) -> str:
    """Unix seconds as the log lines write them (ISO 8601, UTC), to the second."""
    return datetime.fromtimestamp(wall_time, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ago(seconds: float) -> str:
    """``4 s``, ``3 min``, ``2 h``: how long ago, as a person reads it."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


def _last_error(last: LastError) -> str:
    stamp = utc_time(last.wall_time)
    if last.outcome == SKIPPED:  # the canary sends nothing: say why, not "last error"
        return (
            f'<p class="last-error skipped">canary skipped: '
            f'<code class="error">{escape(last.error)}</code> (since {stamp})</p>'
        )
    return (
        f'<p class="last-error">last canary error <time datetime="{stamp}">{stamp}</time> '
        f"({ago(last.age_seconds)} ago): <b>{escape(last.outcome)}</b> — "
        f'<code class="error">{escape(last.error or "(no message)")}</code></p>'
    )


def _not_serving(verdict: NotServing) -> str:
    """What ``TritonModelNotServing`` says: ready server, every request failing."""
    last = verdict.last_error
    error = (
        ""
        if last is None
        else f': <b>{escape(last.outcome)}</b> — <code class="error">'
        f"{escape(last.error or '(no message)')}</code>"
    )
    return (
        f'<p class="not-serving breach" data-failed="{verdict.failed}">not serving: the '
        f"server reads ready, but the last {verdict.failed} canary requests failed "
        f"(for {ago(verdict.failing_seconds)}){error}</p>"
    )


def _evidence_value(name: str, value: float) -> str:
    """Seconds as milliseconds, ratios and shares as percentages, the rest as numbers."""
    if name.endswith("_seconds"):
        return format_ms2(value)
    if name.endswith(("_ratio", "_share")) or name in {"gain", "gpu_utilization"}:
        return f"{value:.1%}"
    return f"{value:.4g}"


def _recommendation(r: AdviceLine) -> str:
    evidence = "".join(
        f"<dt>{escape(name)}</dt><dd>{escape(_evidence_value(name, value))}</dd>"
        for name, value in r.evidence.items()
    )
    effect = (
        f' <span class="muted">({escape(r.expected_effect)})</span>' if r.expected_effect else ""
    )
    return (
        f'<li class="recommendation">[{escape(r.severity)}] <b>{escape(r.action)}</b> '
        f"{escape(r.parameter)}: {escape(r.current)} → {escape(r.proposed)} — {escape(r.reason)}"
        f"{effect}" + (f'<dl class="evidence">{evidence}</dl>' if evidence else "") + "</li>"
    )


def _p95_history(status: ModelStatus) -> str:
    points = status.p95_history
    if not points:
        return '<p class="p95-history muted">no p95 history yet</p>'
    span = span_text(points[0].age_seconds)
    budget = status.budget_seconds
    dashed = "" if budget is None else f"; dashed: the {format_ms(budget)} budget"
    return (
        f'<figure class="p95-history">{p95_sparkline(points, budget)}'
        f"<figcaption>canary p95, last {span}: now {format_ms(points[-1].p95_seconds)}, highest "
        f"{format_ms(max(p.p95_seconds for p in points))}{dashed}</figcaption></figure>"
    )


def _verdict(status: ModelStatus) -> str:
    reasons = status.breach_reasons()
    if reasons:
        return f'<p class="verdict breach">breaching: {escape("; ".join(reasons))}</p>'
    if status.quantiles.get("p95") is None and not status.slos:
        return '<p class="verdict muted">no data yet</p>'
    return '<p class="verdict ok">within SLO</p>'


def _firing(slo: SloLine) -> str:
    return "" if slo.firing is None else f'<span class="breach">{escape(slo.firing)}</span>'


_SLO_HEADERS = "<th>objective</th><th>error budget</th><th>burn rates</th><th>alert</th>"
"""The headers over :func:`_slo_cells`, in the SLO table and the streaming table alike."""


def _slo_cells(slo: SloLine) -> str:
    """One SLO's objective, budget bar, burn chart and alert: the same cells wherever an
    SLO is drawn."""
    return (
        f'<td>{slo.objective:.3%}</td><td class="budget">{budget_bar(slo.budget_remaining)}</td>'
        f"<td>{burn_chart(slo.burn_rates)}</td><td>{_firing(slo)}</td>"
    )


def _slo_table(slos: Sequence[SloLine]) -> str:
    rows = "".join(
        f'<tr class="slo-line"><td>{escape(s.name)}</td>{_slo_cells(s)}</tr>' for s in slos
    )
    return f'<table class="slo"><tr><th>SLO</th>{_SLO_HEADERS}</tr>{rows}</table>'


def _stream_table(status: ModelStatus, stream: StreamStatus) -> str:
    """Per measure its 5-minute quantiles, coloured against the threshold of its SLO, then
    that SLO's cells (or a note that none is set); output tokens/s in the caption."""
    rate = stream.output_tokens_per_second
    rate_data = "" if rate is None else f' data-output-tokens-per-second="{rate!r}"'
    rows = []
    for measure, words in STREAM_MEASURES.items():
        quantiles, slo = stream.quantiles.get(measure, {}), status.stream_slo(measure)
        threshold = None if slo is None else slo.threshold_seconds
        p95 = quantiles.get("p95")
        over = p95 is not None and threshold is not None and p95 > threshold
        state = "muted" if p95 is None else "breach" if over else "ok"
        data = "" if p95 is None else f' data-p95-seconds="{p95!r}"'
        slo_cells = (
            f'<td colspan="4" class="muted">no {measure.upper()} SLO set</td>'
            if slo is None
            else _slo_cells(slo)
        )
        rows.append(
            f'<tr class="stream-measure" data-measure="{measure}"{data}><td>{escape(words)}</td>'
            f"<td>{format_stream_ms(measure, quantiles.get('p50'))}</td>"
            f'<td class="p95 {state}">{format_stream_ms(measure, p95)}</td>'
            f"<td>{format_stream_ms(measure, quantiles.get('p99'))}</td>"
            f"<td>{format_stream_ms(measure, threshold)}</td>{slo_cells}</tr>"
        )
    tokens = "–" if rate is None else f"{rate:.1f}"
    return (
        f'<table class="stream"{rate_data}><caption>streaming canary, last 5 min: output '
        f'<b class="tokens-per-second">{tokens} tokens/s</b> ({stream.output_tokens} tokens '
        f"since start)</caption><tr><th>measure</th><th>p50</th><th>p95</th><th>p99</th>"
        f"<th>threshold</th>{_SLO_HEADERS}</tr>{''.join(rows)}</table>"
    )


def _model_section(status: ModelStatus) -> str:
    p95 = status.quantiles.get("p95")
    budget = status.budget_seconds
    state = "no data" if p95 is None else ("ok" if budget is None or p95 <= budget else "breach")
    against = (
        "the whole stream, no latency SLO (TTFT and ITL judge a stream)"
        if budget is None
        else f"against a budget of {format_ms(budget)}"
    )
    up = {True: "up", False: "DOWN", None: "unknown"}[status.up]
    parts = [
        f'<section class="model" data-target="{escape(status.target)}" data-model="{escape(status.model)}">',
        f"<h2>{escape(status.target)} / {escape(status.model)} "
        f'<span class="badge">{escape(status.protocol)}</span> <span class="muted">server {up}</span></h2>',
        f'<p>canary p95 <span class="{"breach" if state == "breach" else "ok"}">{format_ms(p95)}</span>'
        f" {against} — <b>{state}</b>; "
        f"p50 {format_ms(status.quantiles.get('p50'))}, p99 {format_ms(status.quantiles.get('p99'))}; "
        + ", ".join(f"{escape(k)} {v}" for k, v in sorted(status.outcomes.items()) if v)
        + "</p>",
        _verdict(status),
        _p95_history(status),
    ]
    if status.not_serving is not None:
        parts.append(_not_serving(status.not_serving))
    if status.input_refused is not None:
        parts.append(
            '<p class="input-refused">the model refuses the canary\'s input: give '
            f'<code>canary.input_data</code> — <code class="error">{escape(status.input_refused)}'
            "</code></p>"
        )
    if status.last_error is not None:
        parts.append(_last_error(status.last_error))
    parts.append(_client_share(status.client_share))
    if status.breakdown:
        cells = "".join(
            f"<td>{escape(stage)}<br>{format_ms(value)}</td>"
            for stage, value in status.breakdown.items()
        )
        neck = f" — <b>{escape(status.bottleneck)}</b>" if status.bottleneck else ""
        parts.append(
            f'<table class="breakdown"><caption>latency breakdown{neck}</caption><tr>{cells}</tr></table>'
        )
    if status.steps:
        parts.append(f'<p class="steps">steps per request: {escape(status.steps)}</p>')
    if status.cache:
        parts.append(f'<p class="cache">{escape(status.cache)}</p>')
    parts += [status.capacity_html] if status.capacity_html else []
    slos = status.slos
    if status.stream is not None:
        parts.append(_stream_table(status, status.stream))
        slos = [s for s in slos if s.kind not in STREAM_MEASURES]  # drawn beside their measure
    if slos:
        parts.append(_slo_table(slos))
    if status.recommendations:
        items = "".join(_recommendation(r) for r in status.recommendations)
        parts.append(f"<h3>recommendations</h3><ul>{items}</ul>")
    elif status.advice_blocked:
        parts.append(
            f'<h3>recommendations</h3><p class="advice-blocked" data-reason='
            f'"{escape(status.advice_blocked)}">no safe change: '
            f"<b>{escape(status.advice_blocked.replace('_', ' '))}</b> "
            f"(tritonwatch_advice_blocked; the runbook's advice section says what helps)</p>"
        )
    if status.experiments:
        items = "".join(
            f'<li class="experiment">{escape(e.parameter)}: <b>{escape(e.verdict)}</b> — {escape(e.reason)}</li>'
            for e in status.experiments
        )
        parts.append(f"<h3>experiments</h3><ul>{items}</ul>")
    if status.sweep_svg:
        parts.append(f'<h3>last sweep</h3><div class="sweep">{status.sweep_svg}</div>')
    parts.append("</section>")
    return "\n".join(parts)


def headline(snapshot: StatusSnapshot) -> str:
    """``1 of 3 models breaching their SLO`` (or ``no models configured``)."""
    total = len(snapshot.models)
    if total == 0:
        return "no models configured"
    noun = "model" if total == 1 else "models"
    return f"{len(snapshot.breaching)} of {total} {noun} breaching their SLO"


def render_status_page(snapshot: StatusSnapshot, page: int = 1) -> str:
    """The whole page (UTF-8 HTML): the models that need a look in full, the rest
    summarised ``page`` by page (:mod:`~tritonwatch.export.status_listing`)."""
    state = "breach" if snapshot.breaching else "ok"
    health = (
        '<span class="ok">healthy</span>'
        if snapshot.healthy
        else '<span class="breach">unhealthy</span>'
    )
    shown = listing(snapshot.models, page)
    sections = "\n".join(_model_section(m) for m in shown.sections) + summary_table(shown)
    if not snapshot.models:
        sections = "<p>no models configured</p>"
    title = escape(headline(snapshot))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tritonwatch — {title}</title><style>{_STYLE}</style></head>
<body><h1 class="headline" data-breaching="{len(snapshot.breaching)}" data-models="{len(snapshot.models)}">
<span class="{state}">{title}</span></h1>
<p>tritonwatch {escape(__version__)}, daemon {health} · <a href="/metrics">metrics</a> · <a href="/health">health</a></p>
{sections}
</body></html>
"""
