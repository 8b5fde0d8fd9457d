"""Judge once (issue "One request path, no races", item 3): the daemon's scrape job judges
its target once per scrape cycle, and the evaluator (the advisor's inputs, the bottleneck
verdict), the exporter and the status page read that judged state, never judging again.

The daemon is driven by hand, not started: its scrape job and its evaluation job run on
this thread against the simulator on virtual time, on a fake clock.
"""

from __future__ import annotations

import asyncio
from inspect import signature
from typing import Any

import pytest
from prometheus_client import generate_latest

from tritonwatch.analysis import breakdown
from tritonwatch.config.schema import Config
from tritonwatch.export.status_view import StatusInputs
from tritonwatch.records.target_state import TargetState
from tritonwatch.runtime import daemon as daemon_module
from tritonwatch.runtime import evaluator as evaluator_module
from tritonwatch.runtime.daemon import Daemon
from tritonwatch.sim.core import SimCore
from tritonwatch.sim.load import as_request, example_inputs
from tritonwatch.sim.server import Simulator

pytestmark = pytest.mark.sim

MODEL = "simple"


class Clock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _infer(sim: Simulator, count: int) -> None:
    """``count`` requests to ``simple``, one after another, in process."""

    async def requests(core: SimCore) -> None:
        inputs = as_request(example_inputs(core.repository.slot(MODEL).spec))
        for _ in range(count):
            await core.repository.infer(MODEL, "", inputs)
            await asyncio.sleep(0)

    sim.run_async(requests)


def _config(sim: Simulator) -> Config:
    return Config.model_validate(
        {
            "targets": [
                {
                    "name": "sim",
                    "url": sim.http_url,
                    "metrics_url": sim.metrics_url,
                    "models": [{"name": MODEL, "slo": {"latency": {"threshold": "50ms"}}}],
                }
            ],
            "nvml": {"enabled": False},
        }
    )


def test_one_judgement_per_scrape_and_every_reader_sees_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Breaks if anything but the scrape judges the target again (the evaluator's
    bottleneck verdict, the advisor's inputs, a read of the board by the exporter or the
    status page), or if a reader sees another Bottleneck object than the board holds."""
    judged_models: list[str] = []
    judge_model = breakdown.judge_model

    def counting(state: Any, thresholds: Any = None) -> Any:
        judged_models.append(state.model)
        return judge_model(state, thresholds)

    monkeypatch.setattr(breakdown, "judge_model", counting)  # every judge_target's
    advisor_states: list[TargetState] = []
    advisor_input_for = evaluator_module.advisor_input_for

    def advisor_input(*args: Any, **kwargs: Any) -> Any:
        advisor_states.append(signature(advisor_input_for).bind(*args, **kwargs).arguments["state"])
        return advisor_input_for(*args, **kwargs)

    monkeypatch.setattr(evaluator_module, "advisor_input_for", advisor_input)
    page_inputs: list[StatusInputs] = []
    status_snapshot = daemon_module.status_snapshot

    def page(inputs: StatusInputs) -> Any:
        page_inputs.append(inputs)
        return status_snapshot(inputs)

    monkeypatch.setattr(daemon_module, "status_snapshot", page)

    with Simulator(seed=0, clock="virtual") as sim:
        config, clock = _config(sim), Clock()
        daemon = Daemon(None, config, clock=clock)
        # What the daemon's apply does for the scrape, the board and the evaluator.
        daemon.triton.apply(config)
        daemon.bottlenecks.apply(config)
        daemon.evaluator.apply(config, config)
        try:
            judged_models.clear()
            daemon._scrape("sim")
            _infer(sim, 3)
            sim.poll_metrics()
            clock.now += 15.0
            daemon._scrape("sim")
            assert judged_models == [MODEL, MODEL]  # one judgement per scrape cycle
            daemon.evaluator.evaluate()
            daemon.status_snapshot()
            generate_latest(daemon.registry)
            daemon.bottlenecks.states()
        finally:
            daemon.triton.close()
            daemon._canaries.stop()  # never started: closes its event loop
    assert judged_models == [MODEL, MODEL]  # the readers judged nothing
    (held,) = daemon.bottlenecks.states()
    bottleneck = held.models[MODEL].bottleneck
    assert bottleneck is not None and held.models[MODEL].breakdown is not None
    (advised,) = advisor_states
    assert advised.models[MODEL].bottleneck is bottleneck
    (shown,) = [state for inputs in page_inputs for state in inputs.triton]
    assert shown.models[MODEL].bottleneck is bottleneck
