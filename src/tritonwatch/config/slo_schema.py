"""The ``slo`` section (docs/design.md §6), and which SLOs judge a model.

A model that answers once is judged on its whole request: a ``latency`` SLO and an
``availability`` SLO. A model the canary streams from (a generative model: its
``canary.stream.mode`` is ``on``, its protocol ``openai``, or, with ``auto``, its config
says ``decoupled``) is judged per token instead, by the two measures LLM serving stacks
publish SLOs for: **time to first token** (``ttft``) and **inter-token latency**
(``itl``), on by default for it, with :data:`DEFAULT_TTFT` and :data:`DEFAULT_ITL`. A
whole stream lasts as long as the tokens the daemon asks for
(``canary.stream.max_tokens``), so judging it against a single-request budget would page
on the daemon's own choice: for a stream the ``latency`` SLO is off unless the user
wrote it (:meth:`SLOConfig.judged`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from tritonwatch.config.canary_schema import Range
from tritonwatch.config.section import Section
from tritonwatch.config.types import Duration, Objective
from tritonwatch.config.units import format_duration

DEFAULT_TTFT_SECONDS = 2.0
DEFAULT_ITL_SECONDS = 0.200
DEFAULT_STREAM_OBJECTIVE = 0.99
"""The stream SLOs' defaults are MLPerf Inference's server-scenario latency constraints
for LLMs (mlcommons/inference, ``loadgen/mlperf.conf``): the 99th percentile
(``*.Server.target_latency_percentile = 99``) of time to first token within 2 s
(Llama-2-70B, Mixtral-8x7B, Llama-3.1-8B, DeepSeek-R1) and of time per output token
within 200 ms (Llama-2-70B and Mixtral; 175 ms for Llama-3.1-405B, 100 ms for 8B). The
ITL threshold takes the loosest of them because the canary's ITL is every gap, not a
request's mean: a gap takes a decode step plus whatever prefill the engine interleaves.
genai-perf's and AIPerf's goodput examples (TTFT 75-100 ms, ITL 3.4-20 ms) are the
numbers of one small model on an idle GPU, the kind a user sets once the model is
known, not a default for any model. At 99 % a page (14.4× over 1 h and 5 m) needs more
than 14 % of the hour's first tokens over 2 s, or of its gaps over 200 ms."""


class LatencySLO(Section):
    """A fraction ``objective`` of requests must finish faster than ``threshold``."""

    threshold: Duration = 0.050
    """The duration an event must stay within to be good: a canary request's end-to-end
    latency (for ``ttft``, the wait for the first token; for ``itl``, each gap between tokens)."""
    objective: Objective = 0.95
    """The fraction of events that must be good, strictly between 0 and 1 (``0.95``: 95 %)."""


class TtftSLO(LatencySLO):
    """A fraction ``objective`` of streams must bring their first token within ``threshold``
    (from the request's intended send time); on by default for a streamed model."""

    threshold: Duration = DEFAULT_TTFT_SECONDS
    """The longest wait for the first token that is good (``2s``, MLPerf's server bound)."""
    objective: Objective = DEFAULT_STREAM_OBJECTIVE
    """The fraction of streams whose first token must be in time (``0.99``, MLPerf's p99)."""


class ItlSLO(LatencySLO):
    """A fraction ``objective`` of the gaps between a stream's tokens must be shorter than
    ``threshold`` (one event per gap); on by default for a streamed model."""

    threshold: Duration = DEFAULT_ITL_SECONDS
    """The longest gap between two tokens that is good (``200ms``, MLPerf's loosest TPOT)."""
    objective: Objective = DEFAULT_STREAM_OBJECTIVE
    """The fraction of gaps that must be short enough (``0.99``, MLPerf's p99)."""


DEFAULT_TTFT = TtftSLO()
DEFAULT_ITL = ItlSLO()


class AvailabilitySLO(Section):
    """A fraction ``objective`` of requests must succeed."""

    objective: Objective = 0.999
    """The fraction of requests that must succeed, strictly between 0 and 1 (``0.999``),
    judged on the canary's outcomes and on Triton's own success and failure counters."""


DEFAULT_ALERT_MIN_BAD_EVENTS = 10.0
"""A Triton restart of about 12 s costs a 1 request/s canary 5 to 10 failures before its
circuit breaker holds back: that many must never raise a burn alert on their own."""


@dataclass(frozen=True, slots=True)
class JudgedSLOs:
    """The threshold SLOs that judge one model (None: that SLO is off for it)."""

    latency: LatencySLO | None
    ttft: LatencySLO | None
    itl: LatencySLO | None

    def by_kind(self) -> dict[str, LatencySLO]:
        """``latency``/``ttft``/``itl`` → its SLO, in that order, the ones that are on."""
        slos = {"latency": self.latency, "ttft": self.ttft, "itl": self.itl}
        return {kind: slo for kind, slo in slos.items() if slo is not None}


class SLOConfig(Section):
    latency: LatencySLO = LatencySLO()
    """Off for a streamed model unless written (globally or for the model): a stream
    lasts as long as the tokens the canary asks for, so it is judged per token."""
    availability: AvailabilitySLO = AvailabilitySLO()
    period: Duration = 28 * 86400.0
    """The rolling span the error budget is counted over (``28d``): the budget left is
    1 − the burn rate over it. The burn-rate alert windows do not depend on it."""
    ttft: TtftSLO | None = None
    """Time to first token (docs/design.md §5). Unset: on with its defaults (99 % within
    2 s) for a streamed model, off for the others; ``null`` turns it off for streams too."""
    itl: ItlSLO | None = None
    """Inter-token latency, one event per gap between tokens. Unset: on with its defaults
    (99 % within 200 ms) for a streamed model, off for the others; ``null``: off."""
    alert_min_bad_events: Annotated[float, Field(ge=0.0)] = DEFAULT_ALERT_MIN_BAD_EVENTS
    """A burn-rate alert needs its long window to hold at least ``alert_min_bad_events /
    (factor × (1 − objective))`` events, so that this many failures alone never raise
    it (a restart seen by a young window); 0 turns the gate off (docs/design.md §6)."""

    @property
    def latency_set(self) -> bool:
        """Whether the user wrote ``slo.latency`` (globally or for the model): only then
        does it judge a streamed model's whole stream."""
        return "latency" in self.model_fields_set

    def judged(self, streams: bool) -> JudgedSLOs:
        """The threshold SLOs of a model that ``streams`` (its canary streams) or not.

        A model that does not stream: ``latency``, and ``ttft``/``itl`` where written. A
        streamed one: ``ttft`` and ``itl`` as written, or their defaults where unset
        (written ``null``: off), and ``latency`` only where the user wrote it.
        """
        if not streams:
            return JudgedSLOs(self.latency, self.ttft, self.itl)
        written = self.model_fields_set
        return JudgedSLOs(
            self.latency if self.latency_set else None,
            self.ttft if "ttft" in written else DEFAULT_TTFT,
            self.itl if "itl" in written else DEFAULT_ITL,
        )

    def stream_itl(self) -> LatencySLO:
        """The ITL SLO of the model once it streams (its default when written off)."""
        return self.judged(streams=True).itl or DEFAULT_ITL


def stream_latency_warning(slo: SLOConfig, max_tokens: int | Range) -> str | None:
    """Why a written ``slo.latency`` misjudges a streamed model's whole stream, or None.

    A stream the canary asks for lasts about ``max_tokens`` (the largest, for a range) ×
    the gap between tokens: with every gap just within the ITL SLO it takes ``max_tokens``
    × the ITL threshold. A latency threshold below that fails streams that meet the ITL
    SLO, so the page would be the daemon's choice of ``max_tokens``, not the server's.
    """
    tokens = max_tokens if isinstance(max_tokens, int) else max_tokens.max
    itl = slo.stream_itl().threshold
    stream = tokens * itl
    if not slo.latency_set or stream <= slo.latency.threshold:
        return None
    return (
        f"is shorter than a stream the canary asks for: {tokens} tokens "
        f"(canary.stream.max_tokens) × the {format_duration(itl)} ITL threshold = "
        f"{format_duration(stream)}, so streams whose every gap meets the ITL SLO still "
        "miss it; raise it, lower max_tokens, or leave slo.latency out (TTFT and ITL judge "
        "a stream)"
    )
