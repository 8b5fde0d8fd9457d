"""Every dashboard query against a real Prometheus scraping the daemon that watches the
simulator: no query errors, and every panel shows data except those listed, with the
reason, in NO_DATA."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from alerting_support import Prometheus
from support import REPO, DaemonProcess, wait_until

pytestmark = pytest.mark.real

DASHBOARDS = REPO / "grafana" / "dashboards"
MIXIN_RULES = (REPO / "mixin" / "prometheus_rules.yaml", REPO / "mixin" / "prometheus_alerts.yaml")
"""Loaded unchanged: the dashboards read the burn rates the shipped recording rules record."""

DASHBOARD_UIDS = {
    "tritonwatch-slo",
    "tritonwatch-latency",
    "tritonwatch-capacity",
    "tritonwatch-gpu",
    "tritonwatch-advice",
    "tritonwatch-llm",
}
_NVML_ONLY = "read from NVML only (Triton's /metrics has no such field); no NVML here"
_HEALTHY = "the healthy model gives the advisor nothing to recommend"
_NO_CHANGE = "no experiment: nobody changes the model's configuration"
_NO_RULES = "the mixin's rules are loaded, and the healthy model raises no alert"
_NO_LLM = "the simulated model is not an LLM: its page prints no TensorRT-LLM or vLLM family"
_NO_STREAM = "the simulated model is not decoupled: no streaming canary writes these series"
_NO_PRICE = "the simulated target has no price: it gets GPU-seconds per 1000 inferences instead"
_FLAT = "the canary's steady load has no rising trend: +Inf (never) unless noise tilts it up"
NO_DATA: dict[tuple[str, str], str] = {
    ("tritonwatch-latency", "Failures by reason"): "the healthy model fails nothing, and "
    "the standard detail level leaves zero-valued reasons out (export/detail.py)",
    ("tritonwatch-gpu", "SM active, SM occupancy, tensor active (Hopper and newer)"): _NVML_ONLY,
    ("tritonwatch-gpu", "Memory per process"): _NVML_ONLY,
    ("tritonwatch-gpu", "Memory bandwidth busy"): _NVML_ONLY,
    ("tritonwatch-gpu", "Clocks"): _NVML_ONLY,
    ("tritonwatch-gpu", "Temperature"): _NVML_ONLY,
    ("tritonwatch-gpu", "Fan speed"): _NVML_ONLY,
    ("tritonwatch-gpu", "Throttle reasons"): _NVML_ONLY,
    ("tritonwatch-gpu", "GPUs"): "tritonwatch_gpu_info lists the GPUs NVML sees; no NVML here",
    ("tritonwatch-gpu", "NVML query failures (time range)"): "per GPU NVML sees; no NVML here",
    ("tritonwatch-advice", "Active recommendations"): _HEALTHY,
    ("tritonwatch-advice", "Recommendation history"): _HEALTHY,
    ("tritonwatch-advice", "annotation Recommendations"): _HEALTHY,
    ("tritonwatch-advice", "Recommendation alerts"): _NO_RULES,
    ("tritonwatch-advice", "Latest experiment verdicts"): _NO_CHANGE,
    ("tritonwatch-advice", "Verdicts over time"): _NO_CHANGE,
    ("tritonwatch-slo", "Active alerts"): _NO_RULES,
    ("tritonwatch-slo", "Alert history"): _NO_RULES,
    ("tritonwatch-llm", "KV cache usage"): _NO_LLM,
    ("tritonwatch-llm", "KV cache usage now"): _NO_LLM,
    ("tritonwatch-llm", "Requests running and waiting"): _NO_LLM,
    ("tritonwatch-llm", "Preemptions per second"): _NO_LLM,
    ("tritonwatch-llm", "Tokens per second"): _NO_LLM,
    ("tritonwatch-latency", "Time to first token"): _NO_STREAM,
    ("tritonwatch-latency", "Inter-token latency"): _NO_STREAM,
    ("tritonwatch-latency", "Output tokens per second"): _NO_STREAM,
    ("tritonwatch-slo", "TTFT and ITL burn rate (1h and 5m)"): _NO_STREAM,
    ("tritonwatch-slo", "TTFT and ITL error budget remaining"): _NO_STREAM,
    ("tritonwatch-capacity", "Cost per 1000 inferences"): _NO_PRICE,
    ("tritonwatch-capacity", "Time to exhaustion"): _FLAT,
}
"""Panels (dashboard uid, title) that have no data in this test's scenario — the
daemon watching one healthy simulated model at a steady load, no price on its target, no
NVML on the host, a Prometheus that loads no rules — each with the reason. Every other panel must show data."""

SELECTED = {"target": "sim", "model": "simple", "gpu": ".*"}
"""What a user would pick in the query variables."""
DATA_TIMEOUT_S = 40
"""How long every panel may take to show data: the first scheduled sweep runs 2 s after
start (the capacity panels' data follows it), and a loaded host stretches it."""
BUILTINS = {"__rate_interval": "1m", "__interval": "15s", "__range": "5m"}
"""Grafana's built-in variables, as Grafana would set them for a 5-minute view."""

_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")
_LABEL_VALUES = re.compile(r"^label_values\((?P<series>.+),\s*(?P<label>\w+)\)$")


def _dashboards() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))]


def _values(dashboard: dict[str, Any]) -> dict[str, str]:
    """Variable values: the selection above for query variables, the defaults for the rest."""
    values = dict(BUILTINS)
    for variable in dashboard["templating"]["list"]:
        name = variable["name"]
        if variable["type"] == "query":
            values[name] = SELECTED[name]
        elif variable["type"] in ("textbox", "custom"):
            values[name] = variable["current"]["value"]
    return values


def substitute(expr: str, values: dict[str, str]) -> str:
    """``expr`` with every Grafana variable replaced; an unknown variable fails the test."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        assert name in values, f"unknown variable ${name} in {expr!r}"
        return values[name]

    return _VARIABLE.sub(one, expr)


def _panel_queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) for every panel target and annotation."""
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]
    for annotation in dashboard["annotations"]["list"]:
        if "expr" in annotation:
            yield f"annotation {annotation['name']}", annotation["expr"]


def _has_finite_value(result: list[dict[str, Any]]) -> bool:
    return any(math.isfinite(float(series["value"][1])) for series in result)


def _label_values(prometheus: Prometheus, series: str, label: str) -> set[str]:
    """What Grafana's ``label_values(series, label)`` lists, through the series API."""
    reply = prometheus.get("/api/v1/series", **{"match[]": series})
    assert reply["status"] == "success", reply
    return {s[label] for s in reply["data"] if label in s}


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Prometheus, DaemonProcess]]:
    """Simulator → daemon (canary and a scheduled sweep) → Prometheus, all on loopback."""
    from tritonwatch.sim.server import Simulator

    with Simulator() as sim:
        config = tmp_path / "tritonwatch.yaml"
        config.write_text(
            "scrape: {interval: 1s, timeout: 500ms}\n"
            "canary: {rate: 20/s}\n"
            # Sweeps 30 s apart: the capacity board samples no load during a sweep (about
            # 6 s here) nor the scrape after it, so the load panels need time between them.
            "sweep: {enabled: true, interval: 30s, first_run_after: 2s, concurrency: [1, 2],"
            " measurement_interval: 300ms, max_windows: 3}\n"
            f"targets: [{{name: sim, url: '{sim.http_url}', metrics_url: '{sim.metrics_url}',"
            " models: [{name: simple}]}]\n"
        )
        daemon = DaemonProcess(config)
        prometheus = None
        try:
            prometheus = Prometheus(tmp_path, daemon.url.removeprefix("http://"), MIXIN_RULES)
            wait_until(prometheus.ready, timeout=20, what="Prometheus to listen", every=0.1)
            wait_until(
                lambda: _has_finite_value(prometheus.query('up{job="tritonwatch"} == 1')),
                timeout=20,
                what="Prometheus' first successful scrape of the daemon",
                every=0.2,
            )
            yield prometheus, daemon
        finally:
            if prometheus is not None:
                prometheus.stop()
            assert daemon.stop() == 0


def test_every_dashboard_query_runs_and_every_panel_has_data(
    stack: tuple[Prometheus, DaemonProcess],
) -> None:
    """Breaks if a query errors, a variable misses the simulator, or a core panel is empty."""
    prometheus, _ = stack
    dashboards = _dashboards()
    # The daemon runs at its default detail level, standard: no burn-rate gauges, no
    # latency histogram (full only); the dashboards must do without them.
    assert not prometheus.query('{__name__=~"tritonwatch_slo_burn_rate|.*_bucket"}')

    # Every expression parses and evaluates: Prometheus answers "success" for each.
    queries: list[tuple[str, str, str]] = []  # (dashboard uid, panel, PromQL)
    for dashboard in dashboards:
        values = _values(dashboard)
        for title, expr in _panel_queries(dashboard):
            promql = substitute(expr, values)
            prometheus.query(promql)
            queries.append((dashboard["uid"], title, promql))
    panels = {(uid, title) for uid, title, _ in queries}
    assert {uid for uid, _ in panels} == DASHBOARD_UIDS
    assert set(NO_DATA) <= panels, f"NO_DATA names no such panel: {set(NO_DATA) - panels}"

    # The variables' own queries run, and list the simulator's target and model.
    for dashboard in dashboards:
        values = _values(dashboard)
        for variable in dashboard["templating"]["list"]:
            if variable["type"] != "query":
                continue
            match = _LABEL_VALUES.match(variable["definition"])
            assert match, variable["definition"]
            series, label = substitute(match["series"], values), match["label"]
            found = _label_values(prometheus, series, label)
            if variable["name"] in ("target", "model"):
                wanted = SELECTED[variable["name"]]
                wait_until(
                    lambda s=series, lbl=label, v=wanted: v in _label_values(prometheus, s, lbl),
                    timeout=20,
                    what=f"{dashboard['uid']}: ${variable['name']} listing {wanted} "
                    f"(first saw {sorted(found)})",
                    every=0.5,
                )

    # Every query of every other panel returns data (the sweep's after its first run).
    deadline = time.monotonic() + DATA_TIMEOUT_S
    while empty := [
        f"{uid} / {title}: {promql}"
        for uid, title, promql in queries
        if (uid, title) not in NO_DATA and not _has_finite_value(prometheus.query(promql))
    ]:
        if time.monotonic() > deadline:  # a wait that gave up, not a bound on time
            raise AssertionError("panels without data:\n" + "\n".join(empty))
        time.sleep(0.5)
