"""Every dashboard query against a real Prometheus scraping the daemon that watches the
simulator: no query errors, and the core panels of the SLO, latency and capacity
dashboards show data."""

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

pytestmark = pytest.mark.e2e

DASHBOARDS = REPO / "grafana" / "dashboards"

CORE_PANELS: dict[str, tuple[str, ...]] = {
    "tritonwatch-slo": (
        "Targets up",
        "Canary p95 / budget",
        "Canary success ratio (time range)",
        "p50, p95, p99 per model (canary, end to end)",
        "Canary requests by outcome",
        "Canary p95 from the histogram",
    ),
    "tritonwatch-latency": (
        "Mean time per request by stage",
        "p95: client end to end vs server",
        "Canary latency distribution",
        "Throughput",
        "Average batch size",
        "Pending requests",
    ),
    "tritonwatch-capacity": (
        "Knee",
        "Operating point",
        "Best throughput within the budget",
        "Last sweep finished",
        "Throughput and p95 per concurrency (last sweep)",
        "Every level of the last sweep",
    ),
}
"""Panels that must return data once the daemon exports what they read."""

SELECTED = {"target": "sim", "model": "simple", "gpu": ".*"}
"""What a user would pick in the query variables."""
BUILTINS = {"__rate_interval": "1m", "__interval": "15s", "__range": "5m"}
"""Grafana's built-in variables, as Grafana would set them for a 5-minute view."""

_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")
_LABEL_VALUES = re.compile(r"^label_values\((?P<series>.+),\s*(?P<label>\w+)\)$")
_METRIC = re.compile(r"\b(?:tritonwatch_\w+|ALERTS)\b")


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


def _exported(daemon: DaemonProcess) -> set[str]:
    """Sample names the daemon exports now (families without samples left out)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        sample.name
        for family in text_string_to_metric_families(daemon.metrics())
        for sample in family.samples
    }


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Prometheus, DaemonProcess]]:
    """Simulator → daemon (canary and a scheduled sweep) → Prometheus, all on loopback."""
    from tritonwatch.sim.server import Simulator

    with Simulator() as sim:
        config = tmp_path / "tritonwatch.yaml"
        config.write_text(
            "scrape: {interval: 1s, timeout: 500ms}\n"
            "canary: {rate: 20/s}\n"
            "sweep: {enabled: true, interval: 2s, concurrency: [1, 2], measurement_interval: 300ms,"
            " max_windows: 3}\n"
            f"targets: [{{name: sim, url: '{sim.http_url}', models: [{{name: simple}}]}}]\n"
        )
        daemon = DaemonProcess(config)
        prometheus = None
        try:
            prometheus = Prometheus(tmp_path, daemon.url.removeprefix("http://"))
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


def test_every_dashboard_query_runs_and_core_panels_have_data(
    stack: tuple[Prometheus, DaemonProcess],
) -> None:
    prometheus, daemon = stack
    dashboards = _dashboards()
    assert {d["uid"] for d in dashboards} >= set(CORE_PANELS)

    # Every expression parses and evaluates: Prometheus answers "success" for each.
    queries: list[tuple[str, str, str]] = []  # (dashboard uid, panel, PromQL)
    for dashboard in dashboards:
        values = _values(dashboard)
        for title, expr in _panel_queries(dashboard):
            promql = substitute(expr, values)
            prometheus.query(promql)
            queries.append((dashboard["uid"], title, promql))

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

    # Core panels show data, once the daemon exports every metric they read.
    exported = _exported(daemon)
    waiting = []
    pending = []
    for uid, title, promql in queries:
        if title not in CORE_PANELS.get(uid, ()):
            continue
        metrics = set(_METRIC.findall(promql))
        if metrics <= exported:
            waiting.append((uid, title, promql))
        else:
            pending.append(f"{uid} / {title}: not exported yet: {sorted(metrics - exported)}")
    covered = {(uid, title) for uid, title, _ in waiting}
    for uid, titles in CORE_PANELS.items():
        for title in titles:
            assert any(t == title for u, t, _ in queries if u == uid), f"{uid}: no {title!r}"
    assert {uid for uid, _ in covered} == set(CORE_PANELS), covered

    deadline = time.monotonic() + 25
    while empty := [
        f"{uid} / {title}: {promql}"
        for uid, title, promql in waiting
        if not _has_finite_value(prometheus.query(promql))
    ]:
        assert time.monotonic() < deadline, "core panels without data:\n" + "\n".join(empty)
        time.sleep(0.5)
    if pending:
        print("core panel queries waiting for the daemon to export their metrics:")
        print("\n".join(pending))
