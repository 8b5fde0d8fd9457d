"""Grafana dashboards for the metrics tritonwatch exports, generated from code.

Six dashboards, one module each: :mod:`~tritonwatch.dashboards.slo` (SLO overview),
:mod:`~tritonwatch.dashboards.latency` (latency breakdown),
:mod:`~tritonwatch.dashboards.gpu`, :mod:`~tritonwatch.dashboards.capacity` (capacity and
headroom from :mod:`~tritonwatch.dashboards.capacity_headroom`, then sweeps),
:mod:`~tritonwatch.dashboards.advice` (recommendations and experiments) and
:mod:`~tritonwatch.dashboards.llm` (LLM serving: KV cache, running/waiting, tokens). They are
plain dicts in Grafana's dashboard JSON model; ``python -m tritonwatch.dashboards``
writes them to ``grafana/dashboards/`` and ``--check`` fails when the committed files
differ from what the code builds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tritonwatch.dashboards import advice, capacity, gpu, latency, llm, slo

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class DashboardFile:
    """A dashboard and the file name it is committed under."""

    filename: str
    build: Callable[[], Json]


DASHBOARDS: tuple[DashboardFile, ...] = (
    DashboardFile("slo-overview.json", slo.build),
    DashboardFile("latency-breakdown.json", latency.build),
    DashboardFile("gpu.json", gpu.build),
    DashboardFile("capacity.json", capacity.build),
    DashboardFile("recommendations.json", advice.build),
    DashboardFile("llm-serving.json", llm.build),
)


def render(dashboard: Json) -> str:
    """The JSON text as committed: two-space indent, keys in build order, final newline."""
    return json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n"


def render_all() -> dict[str, str]:
    """Every dashboard's file name and JSON text."""
    return {entry.filename: render(entry.build()) for entry in DASHBOARDS}


def expressions(dashboard: Json) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel query and annotation of ``dashboard``, with its
    Grafana variables still in place; ``where`` names the panel and query."""
    for panel in dashboard.get("panels", []):
        for target in panel.get("targets", []):
            yield f"{panel['title']} [{target['refId']}]", target["expr"]
    for annotation in dashboard.get("annotations", {}).get("list", []):
        if "expr" in annotation:
            yield f"annotation {annotation['name']}", annotation["expr"]
