"""The committed rules over a real daemon's series: promtool computes every SLO's error
ratio from two scrapes of ``tritonwatch run`` (the demo config, on the simulator) and
gets what the daemon's own SLI counters say, and what its canary's histogram and
outcomes say at full detail, by the SLIs' definitions (docs/design.md §6)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from support import REPO, DaemonProcess, wait_until
from tritonwatch.analysis.slo import WINDOWS
from tritonwatch.commands.rules.generate import BURN_RATE, OBJECTIVE, sli_error_record
from tritonwatch.config import load_config
from tritonwatch.records.observations import NOT_THE_SERVERS

pytestmark = pytest.mark.real

DEMO = REPO / "examples" / "demo.yaml"
COMMITTED = REPO / "deploy" / "prometheus" / "rules" / "tritonwatch-slo.rules.yml"
EVENTS, GOOD = "tritonwatch_slo_events_total", "tritonwatch_slo_good_events_total"
RULE_INPUTS = (
    EVENTS,
    GOOD,
    "tritonwatch_slo_objective_ratio",
    "tritonwatch_slo_alert_min_bad_events",
)
"""What the SLO rules read: the daemon's SLI counters, objectives and gates."""
REQUESTS = "tritonwatch_canary_requests_total"
BUCKET, COUNT = (
    "tritonwatch_canary_latency_seconds_bucket",
    "tritonwatch_canary_latency_seconds_count",
)
Series = tuple[str, frozenset[tuple[str, str]]]
Reading = dict[Series, float]


def _reading(exposition: str) -> Reading:
    """The demo model's series in a /metrics text that the rules or the SLIs read."""
    wanted = (*RULE_INPUTS, REQUESTS, BUCKET, COUNT)
    return {
        (sample.name, frozenset(sample.labels.items())): float(sample.value)
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name in wanted
        and (sample.labels.get("target"), sample.labels.get("model")) == ("local", "simple")
    }


def _sum(
    reading: Reading, name: str, keep: Callable[[dict[str, str]], bool] = lambda labels: True
) -> float:
    return sum(v for (n, labels), v in reading.items() if n == name and keep(dict(labels)))


def _of(slo: str) -> Callable[[dict[str, str]], bool]:
    return lambda labels: labels["slo"] == slo


def _exported(reading: Reading) -> dict[str, tuple[float, float]]:
    """(events, good) of each SLO, as the daemon's SLI counters say."""
    slos = {dict(labels)["slo"] for name, labels in reading if name == EVENTS}
    return {slo: (_sum(reading, EVENTS, _of(slo)), _sum(reading, GOOD, _of(slo))) for slo in slos}


def _from_the_canary(reading: Reading, threshold: float) -> dict[str, tuple[float, float]]:
    """(events, good) of each SLO by its definition, from the canary's own series:
    availability, every outcome but our client's faults, good the successes; latency,
    every request, good those in the bucket at the threshold."""

    def at_threshold(labels: dict[str, str]) -> bool:
        return labels["le"] != "+Inf" and float(labels["le"]) == threshold

    return {
        "availability": (
            _sum(reading, REQUESTS, lambda labels: labels["outcome"] not in NOT_THE_SERVERS),
            _sum(reading, REQUESTS, lambda labels: labels["outcome"] == "success"),
        ),
        "latency": (_sum(reading, COUNT), _sum(reading, BUCKET, at_threshold)),
    }


def _two_scrapes(config: Path, threshold: float, between: Callable[[], object]) -> list[Reading]:
    """Two /metrics readings of a real daemon on ``config``, some 40 canary requests
    apart, with ``between`` run right after the first. A scrape renders the SLI counters
    and the canary's series from two snapshots, so a request that ends in between shows
    in one only: a reading is taken only where both say the same."""
    daemon = DaemonProcess(config)
    readings: list[Reading] = []

    def agreed_beyond(events: float) -> bool:
        reading = _reading(daemon.metrics())
        exported = _exported(reading)
        if exported != _from_the_canary(reading, threshold) or not exported:
            return False
        readings.append(reading)
        return exported["availability"][0] > events

    try:
        what = "canary results in a scrape where the SLI counters and the canary agree"
        wait_until(lambda: agreed_beyond(0), 30, what, every=0.2)
        between()
        first = _exported(readings[0])["availability"][0]
        wait_until(lambda: agreed_beyond(first + 40), 30, f"40 more {what}", every=0.2)
    finally:
        assert daemon.stop() == 0
    return [readings[0], readings[-1]]


def _input_series(first: Reading, second: Reading) -> list[dict[str, str]]:
    """Each rule input at its first reading for 5 minutes, then its second: a 5-minute
    rate at minute 5 is then exactly (second - first) / 300 s, without extrapolation."""
    series = []
    for (name, labels), value in sorted(
        second.items(), key=lambda kv: (kv[0][0], sorted(kv[0][1]))
    ):
        if name not in RULE_INPUTS:
            continue
        before = first.get((name, labels), 0.0)
        matchers = ",".join(f'{k}="{v}"' for k, v in sorted(labels))
        values = " ".join([repr(before)] * 5 + [repr(value)])
        series.append({"series": f"{name}{{{matchers}}}", "values": values})
    return series


def _close_to(expr: str, slo: str, value: float, **labels: str) -> dict[str, object]:
    """A promtool case: ``expr`` for the demo model's ``slo`` is ``value`` at minute 5."""
    extra = "".join(f',{k}="{v}"' for k, v in labels.items())
    return {
        "expr": f'abs({expr}{{slo="{slo}"{extra}}} - {value!r}) < bool 1e-9',
        "eval_time": "5m",
        "exp_samples": [
            {"labels": f'{{target="local",model="simple",slo="{slo}"{extra}}}', "value": 1}
        ],
    }


def test_committed_rules_compute_the_slis_the_daemon_counts(tmp_path: Path) -> None:
    """Breaks if the committed rules read series the daemon lacks or compute other SLIs
    than its counters say, or if those counters count other events than the canary's
    histogram and outcomes do."""
    from tritonwatch.sim.server import Simulator

    demo = yaml.safe_load(DEMO.read_text())
    demo_config = load_config(DEMO)
    slo = demo_config.slo_for(demo_config.targets[0].models[0])
    objectives = {"latency": slo.latency.objective, "availability": slo.availability.objective}
    with Simulator() as sim:
        # A quarter of the requests fail: the availability SLI is far from 0.
        sim.inject_fault(kind="error_burst", reason="BACKEND", fraction=0.25, model="simple")
        config = {
            **demo,
            "canary": {"rate": "20/s"},
            # full: the canary's latency histogram too, to check the counters against.
            "exporter": {**demo["exporter"], "detail": "full"},
        }
        config["targets"] = [{**demo["targets"][0], "url": sim.http_url}]
        path = tmp_path / "demo.yaml"
        path.write_text(yaml.safe_dump(config))
        # simple computes in about 1 ms; 65 times that for a second puts some requests
        # between the 50 ms threshold and the next bucket: a wrong bucket shows.
        first, second = _two_scrapes(
            path,
            slo.latency.threshold,
            lambda: sim.inject_fault(
                kind="latency_spike", factor=65, duration_s=1.0, model="simple"
            ),
        )

    errors = {}
    for name, (events, good) in _exported(second).items():
        events_before, good_before = _exported(first).get(name, (0.0, 0.0))
        assert 0 < good - good_before < events - events_before, name  # some bad, some good
        errors[name] = 1 - (good - good_before) / (events - events_before)
    assert set(errors) == {"latency", "availability"}
    cases = [_close_to(sli_error_record("5m"), name, error) for name, error in errors.items()]
    cases += [
        _close_to(BURN_RATE, name, error / (1 - objectives[name]), window="5m")
        for name, error in errors.items()
    ]
    cases += [_close_to(OBJECTIVE, name, objective) for name, objective in objectives.items()]
    # Every window's SLI exists for both SLOs (longer windows extrapolate: no exact value).
    cases += [
        {
            "expr": f"count by (target, model) (({sli_error_record(window)} >= 0) <= 1)",
            "eval_time": "5m",
            "exp_samples": [{"labels": '{target="local",model="simple"}', "value": 2}],
        }
        for window in WINDOWS
    ]
    test_file = tmp_path / "daemon-series.test.yml"
    test_file.write_text(
        yaml.safe_dump(
            {
                "rule_files": [str(COMMITTED)],
                "evaluation_interval": "1m",
                "tests": [
                    {
                        "interval": "1m",
                        "input_series": _input_series(first, second),
                        "promql_expr_test": cases,
                    }
                ],
            }
        )
    )
    result = subprocess.run(
        ["promtool", "test", "rules", str(test_file)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
