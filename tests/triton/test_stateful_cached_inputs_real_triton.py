"""The canary on the models one fixed request cannot measure, against real Triton 2.51.

``seq`` (sequence batching: it fails a request whose sequence it never saw START for,
or whose correlation id is 0), ``cached`` (15 ms of compute behind Triton's response
cache) and ``refuses`` (INVALID_ARG unless 8+ token ids in [1000, 2000)): see
tests/triton_models. One short run per protocol sends every canary at once from the
daemon's engine (and the stateful one through the library path too), then each test
reads what its canaries left. Issue "The models production runs", items 3 to 5.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from canary_support import RecordingClient, canary_plan
from structlog.testing import capture_logs

from real_triton import RealTriton
from tritonwatch.analysis.serving import not_serving
from tritonwatch.analysis.slo import SliSource, SLOKind, SLOSpec
from tritonwatch.export.canary_metrics import CanaryCollector
from tritonwatch.probe.canary.clients import client_for
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.model_canary import ModelCanary
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.canary.refusals import REFUSALS_IN_ROW
from tritonwatch.records.observations import Outcome, ReadinessObservation
from tritonwatch.runtime.slo_event_store import SeriesKey
from tritonwatch.runtime.slo_tracker import SLOTracker
from tritonwatch.state.canary_board import CanaryBoard, SeriesSnapshot

pytestmark = [pytest.mark.real, pytest.mark.xdist_group("real_triton")]
RATE = 25.0
MAX_IN_FLIGHT = 4
SEQUENCE_REQUESTS = 100
"""Per stateful canary: 99 % of them must succeed (at most one may not)."""
CACHED_REQUESTS = 40
SAMPLED_REQUESTS = 30
WAIT_SECONDS = 30.0
CACHED_COMPUTE_SECONDS = 0.015
"""tests/triton_models/cached: ``base_ms`` 15, a sleep, never shorter."""
TOKENS = list(range(1000, 1016))


@dataclass
class Run:
    """One protocol's run: every canary's series, and what Triton counted meanwhile."""

    protocol: str
    series: dict[str, SeriesSnapshot]
    board: CanaryBoard
    cache_misses: int
    cache_hits: int
    logs: list[dict[str, Any]]


def _input_data(path: Path) -> Path:
    """perf_analyzer's --input-data file for ``refuses``, in each of its three forms."""
    raw = base64.b64encode(struct.pack(f"<{len(TOKENS)}q", *TOKENS)).decode()
    document = {
        "data": [
            {"TOKENS": TOKENS[:8]},
            {"TOKENS": {"content": TOKENS[4:14], "shape": [10]}},
            {"TOKENS": {"b64": raw}},
        ]
    }
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def _plans(server: RealTriton, protocol: str, data: Path) -> dict[str, CanaryPlan]:
    """The run's canaries by name; each its own target name, so their series differ."""

    def plan(name: str, model: str, **changes: Any) -> CanaryPlan:
        fields = {"target": name, "rate": RATE, "max_in_flight": MAX_IN_FLIGHT, **changes}
        return canary_plan(server, model, protocol, **fields)

    plans = {
        "seq": plan("seq", "seq"),
        "miss": plan("miss", "cached"),
        "hit": plan("hit", "cached", cache="hit"),
        "refused": plan("refused", "refuses"),
        "sampled": plan("sampled", "refuses", input_data=data),
    }
    plans["seq-library"] = plan("seq-library", "seq")
    return plans


def _cache_counts(server: RealTriton) -> tuple[int, int]:
    stats = server.stats("cached")["inference_stats"]
    return int(stats["cache_miss"]["count"]), int(stats["cache_hit"]["count"])


def _run(server: RealTriton, protocol: str, data: Path) -> Run:
    plans = _plans(server, protocol, data)
    board = CanaryBoard()
    board.declare([p.key for p in plans.values()])
    wanted = {
        "seq": SEQUENCE_REQUESTS,
        "seq-library": SEQUENCE_REQUESTS,
        "miss": CACHED_REQUESTS,
        "hit": CACHED_REQUESTS,
        "refused": REFUSALS_IN_ROW,
        "sampled": SAMPLED_REQUESTS,
    }
    engine = CanaryEngine()
    misses, hits = _cache_counts(server)

    def done() -> bool:
        counts = {s.target: sum(s.outcomes.values()) for s in board.snapshot(time.monotonic())}
        return all(counts[name] >= wanted[name] for name in plans)

    async def go() -> None:
        clients, tasks = [], []
        for name, plan in plans.items():
            client = client_for(protocol, plan.http_url, plan.grpc_url)
            clients.append(client)
            # The engine can send none of seq-library's requests: the library path does.
            sending = RecordingClient(client, engine=name != "seq-library")
            canary = ModelCanary(plan, sending, board, seed=1, engine=engine)
            tasks.append(asyncio.create_task(canary.run()))
        try:
            async with asyncio.timeout(WAIT_SECONDS):
                while not done():
                    await asyncio.sleep(0.02)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for client in clients:
                await client.close()

    with capture_logs() as logs:
        try:
            asyncio.run(go())
        finally:
            engine.stop()
    after_misses, after_hits = _cache_counts(server)
    series = {s.target: s for s in board.snapshot(time.monotonic())}
    return Run(protocol, series, board, after_misses - misses, after_hits - hits, logs)


@pytest.fixture(scope="module", params=["http", "grpc"])
def run(
    request: pytest.FixtureRequest,
    real_triton: RealTriton,
    tmp_path_factory: pytest.TempPathFactory,
) -> Run:
    data = _input_data(tmp_path_factory.mktemp("input-data") / "tokens.json")
    return _run(real_triton, request.param, data)


def test_a_stateful_models_canary_sends_whole_sequences(run: Run) -> None:
    """Breaks if the sequence canary's requests lack a correlation id or START on a
    sequence's first request (Triton refuses those, and the model fails a sequence it
    never saw start), or its flags are lost over either protocol or path."""
    for name in ("seq", "seq-library"):
        outcomes = run.series[name].outcomes
        total = sum(outcomes.values())
        assert total >= SEQUENCE_REQUESTS
        assert outcomes[Outcome.SUCCESS] >= 0.99 * total, (name, run.protocol, outcomes)


def test_a_cached_models_canary_measures_the_model_not_the_cache(run: Run) -> None:
    """Breaks if ``cache: miss`` repeats its bytes (the cache would answer in well
    under a millisecond and hide the model's 15 ms), or ``cache: hit`` measures the
    model instead of the cache."""
    miss, hit = run.series["miss"], run.series["hit"]
    assert miss.outcomes[Outcome.SUCCESS] >= CACHED_REQUESTS
    assert hit.outcomes[Outcome.SUCCESS] >= CACHED_REQUESTS
    assert miss.window_quantiles["5m"][0.95] >= CACHED_COMPUTE_SECONDS
    assert miss.window_quantiles["5m"][0.5] >= CACHED_COMPUTE_SECONDS
    assert run.cache_misses >= miss.outcomes[Outcome.SUCCESS]  # Triton's own count
    # Each request sent before the first answer came (at most max_in_flight) misses; the
    # rest the cache answered (Triton's own count: the cause, not a time a busy host moves).
    assert run.cache_hits >= hit.outcomes[Outcome.SUCCESS] - MAX_IN_FLIGHT


def test_a_refusing_model_is_rejected_backed_off_and_never_a_page(run: Run) -> None:
    """Breaks if a model refusing the canary's synthetic input counts against
    availability, reads as not serving, keeps the canary at full rate, or is not
    exported as tritonwatch_canary_input_refused with Triton's error."""
    refused = run.series["refused"]
    assert refused.outcomes[Outcome.REJECTED] == sum(refused.outcomes.values())
    # Backed off: the stateful canary ran at the same rate for the whole run (at least
    # SEQUENCE_REQUESTS); the refused one stopped after its refusals in a row, plus what
    # was already in flight or due when they came back (more on a loaded host).
    sent_at_full_rate = sum(run.series["seq"].outcomes.values())
    assert REFUSALS_IN_ROW <= refused.outcomes[Outcome.REJECTED] < sent_at_full_rate / 3
    assert refused.failing_since is None
    assert refused.input_refused is not None and "token ids" in refused.input_refused
    now = time.monotonic()
    ready = {"refused": ReadinessObservation("refused", now, Outcome.SUCCESS, True, 0.001)}
    assert not_serving([refused], ready, now + 3600) == []
    spec = SLOSpec("refused", "refuses", SLOKind.AVAILABILITY, 0.999, 28 * 86400.0)
    tracker = SLOTracker([spec])
    tracker.observe_canary([refused], run.board.buckets, at=1_700_000_000.0)
    key = SeriesKey("refused", "refuses", SLOKind.AVAILABILITY, SliSource.CANARY)
    assert tracker.store.counts(key, 300, 1_700_000_000.0).total == 0
    family = {f.name: f for f in CanaryCollector(run.board).collect()}[
        "tritonwatch_canary_input_refused"
    ]
    values = {s.labels["target"]: s.value for s in family.samples}
    assert values["refused"] == 1.0 and values["sampled"] == 0.0
    (line,) = [log for log in run.logs if log["event"] == "canary_input_refused"]
    assert line["hint"] == "give canary.input_data"


def test_input_data_in_perf_analyzers_format_gets_the_refusing_model_served(run: Run) -> None:
    """Breaks if a perf_analyzer input-data file (flat, content+shape and b64 samples)
    is not sent as the model needs it: every request of that canary succeeds."""
    sampled = run.series["sampled"]
    assert sampled.outcomes[Outcome.SUCCESS] == sum(sampled.outcomes.values())
    assert sampled.outcomes[Outcome.SUCCESS] >= SAMPLED_REQUESTS


def test_the_new_models_answer_as_their_configs_say(real_triton: RealTriton) -> None:
    """Breaks if a model this file relies on stops loading or its config changes what
    the canary reads from it (sequence batching, the response cache)."""
    assert "sequence_batching" in real_triton.config("seq")
    assert real_triton.config("cached")["response_cache"] == {"enable": True}
    assert real_triton.config("refuses")["input"][0]["dims"] == [-1]
