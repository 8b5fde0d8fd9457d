"""A streamed model's default SLOs in the daemon's evaluation path, on fake clocks: judged
by time to first token and inter-token latency, not by the whole stream against a
single-request latency budget.

The streams are those of ``tests/triton_models/llm_stream`` as the canary asks for them
by default: 16 tokens, the first after 20 ms, then one every 5 ms, about 95 ms a stream
(the issue's "about 100 ms" against the 50 ms latency default).
"""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from tritonwatch.analysis.slo import SLOKind
from tritonwatch.config import parse_config
from tritonwatch.config.schema import Config
from tritonwatch.config.slo_schema import LatencySLO
from tritonwatch.records.observations import Outcome, StreamResult
from tritonwatch.runtime.evaluator import SLO_STATE_FILE, Evaluator
from tritonwatch.runtime.histogram_bounds import slo_buckets, stream_buckets
from tritonwatch.scrape.triton_scrapers import TritonScrapers
from tritonwatch.state.canary_board import CanaryBoard
from tritonwatch.state.stream_board import StreamBoard

ZERO_CONFIG = """
targets:
  - name: llm
    url: http://127.0.0.1:1
    models: [{name: gen}]
"""
"""No ``slo`` section: every SLO is the daemon's default."""
WALL = 1_700_000_000.0
KEY = ("llm", "gen", "http")
TOKENS = 16
FIRST_TOKEN = 0.020
GAP = 0.005
EVALUATION_INTERVAL = 15


class _Run:
    """An evaluator with its boards, a fake clock, and a canary streaming at 1/s."""

    def __init__(self, config: Config, state_dir: Path | None = None) -> None:
        if state_dir is not None:
            config = config.model_copy(
                update={"state": config.state.model_copy(update={"dir": state_dir})}
            )
        self.now = 0.0
        self.canary = CanaryBoard(slo_buckets(config))
        self.streams = StreamBoard(*stream_buckets(config))
        self.canary.declare([KEY])
        self.evaluator = Evaluator(
            config,
            canary_board=self.canary,
            triton=TritonScrapers(),
            judged_states=list,  # nothing scraped
            registry=CollectorRegistry(),
            stream_board=self.streams,
            clock=lambda: self.now,
            wall_clock=lambda: WALL + self.now,
        )
        self.evaluator.start("http://127.0.0.1:9849/metrics")
        self.pages: set[str] = set()
        """Every SLO that ever had a page firing."""

    def detect(self) -> None:
        """The plain canary read ``decoupled`` and handed over: the series is streamed."""
        self.streams.declare([KEY])

    def stream(self, seconds: float, first_token: float = FIRST_TOKEN, total: float = 0.0) -> None:
        """``seconds`` of one stream a second, evaluating every 15 s."""
        for _ in range(int(seconds)):
            self.now += 1.0
            gaps = (GAP,) * (TOKENS - 1)
            whole = total or first_token + sum(gaps)
            result = StreamResult(
                *KEY, self.now, Outcome.SUCCESS, first_token, gaps, TOKENS, whole, GAP
            )
            self.streams.record(result)
            self.canary.record(result.as_canary_result())
            if int(self.now) % EVALUATION_INTERVAL == 0:
                self.evaluate()

    def evaluate(self) -> None:
        self.evaluator.evaluate()
        self.pages |= {
            alert.labels["slo"]
            for alert in self.evaluator.firing()
            if alert.labels.get("severity") == "page"
        }

    def kinds(self) -> set[str]:
        return {str(spec.kind) for spec in self.evaluator.slo.specs}


def test_a_healthy_stream_pages_nothing_for_30_minutes_then_a_slow_first_token_pages() -> None:
    """Breaks if a zero-config daemon judges a streamed model's whole stream against the
    50 ms latency budget (every stream is over it: that paged within minutes), if it
    does not judge the stream by TTFT and ITL by default, or if first tokens slowed past
    the 2 s TTFT default do not page."""
    run = _Run(parse_config(ZERO_CONFIG, "zero.yaml"))
    run.evaluate()  # before the canary read the model's config: a plain model's SLOs
    assert run.kinds() == {"latency", "availability"}
    run.detect()
    run.stream(30 * 60)
    assert run.kinds() == {"availability", "ttft", "itl"}
    assert run.pages == set()
    assert not run.evaluator.firing()
    (series,) = run.canary.snapshot(run.now)
    # Meaningful: the whole stream is twice the latency default, so judging it so pages.
    assert series.window_quantiles["5m"][0.95] > LatencySLO().threshold
    statuses = {str(s.spec.kind): s for s in run.evaluator.statuses()}
    assert set(statuses) == {"availability", "ttft", "itl"}
    assert statuses["ttft"].spec.threshold_seconds == 2.0
    assert statuses["ttft"].spec.objective == 0.99
    assert statuses["itl"].spec.threshold_seconds == 0.2
    assert statuses["itl"].spec.objective == 0.99
    assert statuses["itl"].burn_rates["1h"] == 0.0  # 15 gaps a stream, each 5 ms
    assert statuses["ttft"].burn_rates["1h"] == 0.0

    run.stream(10 * 60, first_token=2.5)  # past the 2 s default, every stream
    assert run.pages == {"ttft"}
    ttft = next(s for s in run.evaluator.statuses() if s.spec.kind == SLOKind.TTFT)
    assert ttft.firing is not None and str(ttft.firing.severity) == "page"


def test_a_written_latency_still_judges_the_stream_and_is_warned_about_when_too_short() -> None:
    """Breaks if a user's explicit slo.latency stops judging a streamed model, or if the
    daemon does not warn, when it finds the model streaming, that the threshold is
    shorter than max_tokens × the ITL threshold (16 × 200 ms)."""
    config = parse_config(ZERO_CONFIG + "slo: {latency: {threshold: 1s}}\n", "latency.yaml")
    run = _Run(config)
    run.detect()
    with capture_logs() as logs:
        run.stream(EVALUATION_INTERVAL)
    assert run.kinds() == {"latency", "availability", "ttft", "itl"}
    (warning,) = [e for e in logs if e["event"] == "slo_latency_shorter_than_stream"]
    assert warning["model"] == "gen"
    assert "16 tokens (canary.stream.max_tokens) × the 200ms ITL threshold" in warning["problem"]
    assert [e["slos"] for e in logs if e["event"] == "slo_stream_judged"] == [
        ["latency", "ttft", "itl"]
    ]
    run.stream(5 * 60)
    assert run.pages == set()  # 95 ms streams within 1 s
    run.stream(10 * 60, total=1.5)  # whole streams over the written 1 s: it pages
    assert run.pages == {"latency"}


def test_a_stream_remembered_across_a_restart_keeps_its_ttft_history(tmp_path: Path) -> None:
    """Breaks if a restart drops the TTFT/ITL events of a model that streamed (its stream
    SLOs are on only once the canary finds it streaming again, after the state loaded),
    or if a remembered model that turns out to answer plain requests keeps them."""
    config = parse_config(ZERO_CONFIG, "zero.yaml")
    first = _Run(config, tmp_path)
    first.detect()
    first.stream(5 * 60)
    first.evaluator.stop()  # saves the state
    saved = json.loads((tmp_path / SLO_STATE_FILE).read_text())
    assert {entry["slo"] for entry in saved["series"]} == {"availability", "ttft", "itl"}

    second = _Run(config, tmp_path)  # not detected yet: its canary reads the config first
    second.now = first.now
    assert second.kinds() == {"availability", "ttft", "itl"}
    second.evaluate()
    ttft = next(s for s in second.evaluator.statuses() if s.spec.kind == SLOKind.TTFT)
    assert ttft.window_events["1h"] == 5 * 60  # every first token of the first run

    # The model was replaced by one that answers once: the plain canary's requests count.
    second.canary.record(
        StreamResult(*KEY, second.now, Outcome.SUCCESS, None, (), 0, 0.01, None).as_canary_result()
    )
    second.evaluate()
    assert second.kinds() == {"latency", "availability"}
    second.evaluator.stop()
