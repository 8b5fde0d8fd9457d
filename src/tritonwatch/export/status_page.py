"""The status page at ``/``: one server-rendered HTML page, no JavaScript.

Per target and model: readiness, the canary's quantiles against the budget, its last
error (the reason, when it fails), what the client and network add to Triton's own
time (:class:`ClientShare`), the latency breakdown and bottleneck, SLO state,
active recommendations, recent experiment verdicts, and the last sweep's curve as
inline SVG. The page only reads
a :class:`StatusSnapshot`; the daemon assembles one per request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from typing import TYPE_CHECKING

from tritonwatch import __version__
from tritonwatch.probe.canary_stats import LastError

if TYPE_CHECKING:
    from tritonwatch.analysis.breakdown import LatencyBreakdown


@dataclass(frozen=True, slots=True)
class SloLine:
    name: str
    objective: float
    burn_rates: dict[str, float]
    budget_remaining: float | None


@dataclass(frozen=True, slots=True)
class AdviceLine:
    action: str
    parameter: str
    current: str
    proposed: str
    reason: str
    severity: str = "info"


@dataclass(frozen=True, slots=True)
class VerdictLine:
    parameter: str
    verdict: str
    reason: str


@dataclass(frozen=True, slots=True)
class ClientShare:
    """One scrape window's canary mean split into Triton's time and the client's own.

    Both means cover the same window (the scrape interval), so ``end to end = server +
    client & network`` holds exactly. The residual is kept *as measured*: Triton's mean
    covers every client's requests, the canary's only its own, so on a busy server with
    larger requests it can come out negative (the exported ``network_client`` stage is
    clamped at 0; this is not, so the sum still adds up and the reader sees why).
    """

    server_seconds: float
    """Triton's mean request time (``tritonwatch_model_server_latency_seconds``)."""
    queue_seconds: float
    compute_seconds: float
    """compute_input + compute_infer + compute_output."""
    server_other_seconds: float
    end_to_end_seconds: float | None
    """The canary's mean over the window; None when it sent nothing (paused, off)."""

    @classmethod
    def of(cls, breakdown: LatencyBreakdown | None) -> ClientShare | None:
        """From the scrape's breakdown; None before Triton's statistics have a window."""
        if breakdown is None:
            return None
        compute = breakdown.compute_input + breakdown.compute_infer + breakdown.compute_output
        return cls(
            breakdown.server_seconds,
            breakdown.queue,
            compute,
            breakdown.server_other,
            breakdown.end_to_end_seconds,
        )

    @property
    def client_network_seconds(self) -> float | None:
        """End to end minus server: network, serialisation and the client itself."""
        if self.end_to_end_seconds is None:
            return None
        return self.end_to_end_seconds - self.server_seconds

    @property
    def client_network_ratio(self) -> float | None:
        """The residual's share of the end-to-end mean."""
        residual = self.client_network_seconds
        if residual is None or self.end_to_end_seconds is None or self.end_to_end_seconds <= 0:
            return None
        return residual / self.end_to_end_seconds


@dataclass(frozen=True, slots=True)
class ModelStatus:
    target: str
    model: str
    protocol: str
    up: bool | None
    budget_seconds: float
    quantiles: dict[str, float]
    """``p50``/``p95``/``p99`` over the canary's 5-minute window (seconds)."""
    outcomes: dict[str, int]
    breakdown: dict[str, float] | None = None
    bottleneck: str | None = None
    slos: Sequence[SloLine] = ()
    recommendations: Sequence[AdviceLine] = ()
    experiments: Sequence[VerdictLine] = ()
    sweep_svg: str | None = None
    last_error: LastError | None = None
    """The canary's most recent failed request, whatever came after it."""
    client_share: ClientShare | None = None
    """End to end = server + client & network over the last scrape window."""


@dataclass(frozen=True, slots=True)
class StatusSnapshot:
    models: Sequence[ModelStatus] = field(default_factory=tuple)
    healthy: bool = True


_STYLE = """
body{font-family:sans-serif;margin:1.5em;color:#222}h1{font-size:1.4em}
section.model{border:1px solid #ccc;border-radius:6px;padding:.8em 1em;margin:1em 0}
table{border-collapse:collapse;margin:.4em 0}td,th{padding:.2em .7em;border-bottom:1px solid #eee;text-align:left}
.ok{color:#1a7f37}.breach{color:#b42318;font-weight:bold}.muted{color:#777}
.badge{display:inline-block;padding:0 .5em;border-radius:4px;background:#eef}
.last-error{background:#fff4f2;border-left:3px solid #b42318;padding:.2em .6em;word-break:break-word}
"""


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1e3:.1f} ms"


def _ms2(seconds: float | None) -> str:
    """Two decimals: the client's share of a 2 ms model is a few tenths of a millisecond."""
    return "–" if seconds is None else f"{seconds * 1e3:.2f} ms"


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
    if residual is None:
        note = "no canary requests in the window"
    elif residual < 0:
        note = "as measured: Triton's mean covers every client's requests, not only the canary's"
    else:
        note = "means over the last scrape interval"
    return (
        f'<p class="client-share"{data}>client end to end <b>{_ms2(share.end_to_end_seconds)}</b>'
        f" = server {_ms2(share.server_seconds)} (queue {_ms2(share.queue_seconds)}, compute "
        f"{_ms2(share.compute_seconds)}, other {_ms2(share.server_other_seconds)}) + client "
        f'&amp; network <b class="client-network">{_ms2(residual)}{percent}</b> '
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
    return (
        f'<p class="last-error">last canary error <time datetime="{stamp}">{stamp}</time> '
        f"({ago(last.age_seconds)} ago): <b>{escape(last.outcome)}</b> — "
        f'<code class="error">{escape(last.error or "(no message)")}</code></p>'
    )


def _model_section(status: ModelStatus) -> str:
    p95 = status.quantiles.get("p95")
    state = "no data" if p95 is None else ("ok" if p95 <= status.budget_seconds else "breach")
    up = {True: "up", False: "DOWN", None: "unknown"}[status.up]
    parts = [
        f'<section class="model" data-target="{escape(status.target)}" data-model="{escape(status.model)}">',
        f"<h2>{escape(status.target)} / {escape(status.model)} "
        f'<span class="badge">{escape(status.protocol)}</span> <span class="muted">server {up}</span></h2>',
        f'<p>canary p95 <span class="{"breach" if state == "breach" else "ok"}">{_ms(p95)}</span>'
        f" against a budget of {_ms(status.budget_seconds)} — <b>{state}</b>; "
        f"p50 {_ms(status.quantiles.get('p50'))}, p99 {_ms(status.quantiles.get('p99'))}; "
        + ", ".join(f"{escape(k)} {v}" for k, v in sorted(status.outcomes.items()) if v)
        + "</p>",
    ]
    if status.last_error is not None:
        parts.append(_last_error(status.last_error))
    parts.append(_client_share(status.client_share))
    if status.breakdown:
        cells = "".join(
            f"<td>{escape(stage)}<br>{_ms(value)}</td>" for stage, value in status.breakdown.items()
        )
        neck = f" — <b>{escape(status.bottleneck)}</b>" if status.bottleneck else ""
        parts.append(
            f'<table class="breakdown"><caption>latency breakdown{neck}</caption><tr>{cells}</tr></table>'
        )
    if status.slos:
        rows = "".join(
            f"<tr><td>{escape(s.name)}</td><td>{s.objective:.3%}</td>"
            f"<td>{', '.join(f'{w}: {r:.2f}×' for w, r in s.burn_rates.items())}</td>"
            f"<td>{'–' if s.budget_remaining is None else f'{s.budget_remaining:.1%}'}</td></tr>"
            for s in status.slos
        )
        parts.append(
            f'<table class="slo"><tr><th>SLO</th><th>objective</th><th>burn rates</th><th>budget left</th></tr>{rows}</table>'
        )
    if status.recommendations:
        items = "".join(
            f'<li class="recommendation">[{escape(r.severity)}] <b>{escape(r.action)}</b> '
            f"{escape(r.parameter)}: {escape(r.current)} → {escape(r.proposed)} — {escape(r.reason)}</li>"
            for r in status.recommendations
        )
        parts.append(f"<h3>recommendations</h3><ul>{items}</ul>")
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


def render_status_page(snapshot: StatusSnapshot) -> str:
    """The whole page (UTF-8 HTML)."""
    health = (
        '<span class="ok">healthy</span>'
        if snapshot.healthy
        else '<span class="breach">unhealthy</span>'
    )
    sections = (
        "\n".join(_model_section(m) for m in snapshot.models) or "<p>no models configured</p>"
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tritonwatch</title><style>{_STYLE}</style></head>
<body><h1>tritonwatch {escape(__version__)} — {health}</h1>
<p><a href="/metrics">metrics</a> · <a href="/health">health</a></p>
{sections}
</body></html>
"""
