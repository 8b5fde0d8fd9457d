"""What the status page shows, as data: per model its SLOs, advice, verdicts, client
share, streams and the rule that says whether it breaches (:meth:`ModelStatus.breach_reasons`),
and the millisecond formats the page writes. The daemon fills a :class:`StatusSnapshot`;
:mod:`~tritonwatch.export.status_page` and :mod:`~tritonwatch.export.status_listing`
render it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tritonwatch.export.p95_history import P95Point
from tritonwatch.state.canary_board import LastError

if TYPE_CHECKING:
    from tritonwatch.analysis.advisor_records import Recommendation
    from tritonwatch.analysis.serving import NotServing
    from tritonwatch.analysis.slo import SLOStatus
    from tritonwatch.records.target_state import LatencyBreakdown


def format_ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1e3:.1f} ms"


def format_ms2(seconds: float | None) -> str:
    """Two decimals: the client's share of a fast model's latency is under a millisecond."""
    return "–" if seconds is None else f"{seconds * 1e3:.2f} ms"


def format_stream_ms(measure: str, seconds: float | None) -> str:
    """TTFT as latency is shown; ITL with two decimals, a decode step being a few ms."""
    return format_ms2(seconds) if measure == "itl" else format_ms(seconds)


STREAM_MEASURES = {"ttft": "TTFT (time to first token)", "itl": "ITL (inter-token latency)"}
"""The streaming canary's measures, by the SLO kind that judges each, as the page names
them."""


@dataclass(frozen=True, slots=True)
class SloLine:
    name: str
    objective: float
    burn_rates: dict[str, float]
    """window → burn rate, windows without events left out."""
    budget_remaining: float | None
    firing: str | None = None
    """The burn-rate alert condition that holds now, as text; None when none does."""
    kind: str = ""
    """The SLI (``latency``, ``availability``, ``ttft``, ``itl``)."""
    threshold_seconds: float | None = None
    """The latency, TTFT or ITL threshold; None for availability."""

    @classmethod
    def of(cls, status: SLOStatus) -> SloLine:
        """From one evaluated SLO (one source)."""
        rates = {w: r for w, r in status.burn_rates.items() if r is not None}
        firing = status.firing
        return cls(
            f"{status.spec.kind} ({status.source})",
            status.spec.objective,
            rates,
            status.error_budget_remaining,
            None
            if firing is None
            else f"{firing.severity}: burn over {firing.factor:g}× in both {firing.long_window}"
            f" and {firing.short_window}",
            str(status.spec.kind),
            status.spec.threshold_seconds,
        )


@dataclass(frozen=True, slots=True)
class AdviceLine:
    action: str
    parameter: str
    current: str
    proposed: str
    reason: str
    severity: str = "info"
    evidence: Mapping[str, float] = field(default_factory=dict)
    """The numbers behind the advice (the advisor's names: ``*_seconds``, ``*_ratio``…)."""
    expected_effect: str = ""

    @classmethod
    def of(cls, recommendation: Recommendation) -> AdviceLine:
        """A pipeline's step's advice names the step: ``core: max_queue_delay_microseconds``."""
        r = recommendation
        parameter = f"{r.model}: {r.parameter}" if r.pipeline else r.parameter
        return cls(
            str(r.action),
            parameter,
            str(r.current),
            str(r.proposed),
            r.reason,
            str(r.severity),
            dict(r.evidence),
            r.expected_effect,
        )


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
    streamed: bool = False
    """A decoupled model: Triton's request time ends when ``execute()`` hands its
    responses over, so the rest of end to end is the model's own stream, not the network."""

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
            streamed=breakdown.network_client is None and breakdown.end_to_end_seconds is not None,
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
class StreamStatus:
    """What a streaming canary timed over its 5-minute window: for generative models the
    whole-stream latency is not what users feel, the first token and the pace are."""

    quantiles: Mapping[str, Mapping[str, float]]
    """measure (``ttft``/``itl``) → ``p50``/``p95``/``p99`` → seconds (empty: no sample)."""
    output_tokens_per_second: float | None
    """Output tokens over the window's span (None: no stream ended in it)."""
    output_tokens: int
    """Every token received since the series began."""


@dataclass(frozen=True, slots=True)
class ModelStatus:
    target: str
    model: str
    protocol: str
    up: bool | None
    budget_seconds: float | None
    """The latency SLO's threshold; None when no latency SLO judges the model (a stream,
    judged by TTFT and ITL, unless ``slo.latency`` is written)."""
    quantiles: dict[str, float]
    """``p50``/``p95``/``p99`` over the canary's 5-minute window (seconds)."""
    outcomes: dict[str, int]
    breakdown: dict[str, float] | None = None
    bottleneck: str | None = None
    slos: Sequence[SloLine] = ()
    recommendations: Sequence[AdviceLine] = ()
    advice_blocked: str | None = None
    """Why the advisor proposes nothing though the SLO burns (a ``BlockedReason``)."""
    experiments: Sequence[VerdictLine] = ()
    sweep_svg: str | None = None
    last_error: LastError | None = None
    """The canary's most recent failed request, whatever came after it."""
    client_share: ClientShare | None = None
    """End to end = server + client & network over the last scrape window."""
    p95_history: Sequence[P95Point] = ()
    """The canary's 5-minute p95 at each evaluation over the last hour, oldest first."""
    stream: StreamStatus | None = None
    """The streaming canary's TTFT, ITL and tokens; None for a model not streamed."""
    not_serving: NotServing | None = None
    """Set while the server reads ready and every canary request of the model fails
    (``TritonModelNotServing``)."""
    input_refused: str | None = None
    """Triton's error text while the model refuses the canary's input (its canary backs
    off: probe/canary/refusals.py); None otherwise."""
    steps: str | None = None
    """A pipeline's steps per request (:func:`~tritonwatch.export.pipeline_view.steps_line`)."""
    cache: str | None = None
    """The response cache's hit ratio and times
    (:func:`~tritonwatch.export.pipeline_view.cache_line`)."""
    capacity_html: str | None = None
    """Load against capacity, headroom and cost, escaped HTML
    (:mod:`~tritonwatch.export.status_capacity`)."""

    def stream_slo(self, measure: str) -> SloLine | None:
        """The SLO that judges a stream measure (``ttft``/``itl``), when one is set."""
        return next((s for s in self.slos if s.kind == measure), None)

    def breach_reasons(self) -> list[str]:
        """Why the model counts as breaching its SLO; empty when it does not.

        The rule: a model breaches when its canary p95 (the 5-minute window the page
        shows) is over the latency budget, or a streaming model's TTFT or ITL p95 over
        its SLO's threshold, *or* any of its SLOs (latency, availability, TTFT or ITL,
        canary or server source) has a burn-rate alert condition holding now
        (:data:`~tritonwatch.analysis.slo.BURN_POLICY`). The first two are what a person
        sees right now; the last catches what the p95 hides (errors, a slow tail
        between p95 and the objective). A model that is not serving
        (:attr:`not_serving`) breaches too. No data yet is not a breach.
        """
        reasons = []
        if self.not_serving is not None:
            reasons.append(f"not serving: the last {self.not_serving.failed} requests failed")
        p95 = self.quantiles.get("p95")
        if p95 is not None and self.budget_seconds is not None and p95 > self.budget_seconds:
            reasons.append(f"p95 {format_ms(p95)} over the {format_ms(self.budget_seconds)} budget")
        for measure in STREAM_MEASURES if self.stream is not None else ():
            threshold, p95 = self._stream_threshold(measure), self._stream_p95(measure)
            if threshold is not None and p95 is not None and p95 > threshold:
                reasons.append(
                    f"{measure.upper()} p95 {format_stream_ms(measure, p95)} over the "
                    f"{format_stream_ms(measure, threshold)} threshold"
                )
        reasons += [f"{s.name} SLO burning ({s.firing})" for s in self.slos if s.firing]
        return reasons

    def _stream_p95(self, measure: str) -> float | None:
        return None if self.stream is None else self.stream.quantiles.get(measure, {}).get("p95")

    def _stream_threshold(self, measure: str) -> float | None:
        slo = self.stream_slo(measure)
        return None if slo is None else slo.threshold_seconds


@dataclass(frozen=True, slots=True)
class StatusSnapshot:
    models: Sequence[ModelStatus] = field(default_factory=tuple)
    healthy: bool = True

    @property
    def breaching(self) -> list[ModelStatus]:
        """The models that breach their SLO (:meth:`ModelStatus.breach_reasons`)."""
        return [m for m in self.models if m.breach_reasons()]
