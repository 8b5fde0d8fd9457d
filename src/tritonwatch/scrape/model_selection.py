"""Keeps the configured models of a scrape, one record per configured (model, version).

A Triton page lists every loaded model; the daemon watches the ones in its config, so
series stay bounded by the config, not by what a shared server happens to load. A model
configured without a version stands for all its versions: their series are summed, as
Triton's own per-GPU splits are, so a version roll-out looks like one model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TypeVar

from tritonwatch.records.observations import ModelCounters, ModelKey, TritonScrape

K = TypeVar("K")
V = TypeVar("V")


def _summed(tables: Iterable[Mapping[str, float]]) -> MappingProxyType[str, float]:
    total: dict[str, float] = {}
    for table in tables:
        for name, value in table.items():
            total[name] = total.get(name, 0.0) + value
    return MappingProxyType(total)


def merge_versions(model: str, parts: Sequence[ModelCounters]) -> ModelCounters:
    """One record for several versions of ``model``: counters and gauges summed.

    Summaries and histograms of one version are kept; those of several versions are
    dropped, because quantiles over different windows of different versions cannot be
    combined into a quantile of the whole. An LLM engine's families are the exception:
    a vLLM engine labels them ``model_name`` with no version, so on a page that also
    has Triton's per-version families they arrive as a part of their own (version
    ""), whose LLM values and histograms are the engine's whole, and are kept.
    """
    if len(parts) == 1:
        return dataclasses.replace(parts[0], version="")
    return ModelCounters(
        model=model,
        version="",
        counters=_summed(part.counters for part in parts),
        gauges=_summed(part.gauges for part in parts),
        failures_by_reason=_summed(part.failures_by_reason for part in parts),
        summaries=MappingProxyType({}),
        histograms=_engine_only((part.version, part.histograms) for part in parts),
        llm=_engine_only((part.version, part.llm) for part in parts),
    )


def _engine_only(parts: Iterable[tuple[str, Mapping[K, V]]]) -> Mapping[K, V]:
    """The values of the one part that has any, when that part is the unversioned
    engine's; otherwise none (several versions' values do not combine)."""
    present = [(version, values) for version, values in parts if values]
    if len(present) == 1 and present[0][0] == "":
        return present[0][1]
    return MappingProxyType({})


def select_models(scrape: TritonScrape, wanted: Iterable[ModelKey]) -> TritonScrape:
    """The scrape with only the ``wanted`` models, keyed as configured.

    A wanted key with a version selects that version; one with version "" merges every
    version of the model. A wanted model the page does not list is left out.
    """
    selected: dict[ModelKey, ModelCounters] = {}
    versions: dict[str, list[ModelCounters]] = {}  # one pass: linear in the page's models
    for found_key, counters in scrape.models.items():
        versions.setdefault(found_key.model, []).append(counters)
    for key in wanted:
        if key.version:
            found = scrape.models.get(key)
            if found is not None:
                selected[key] = found
            continue
        parts = versions.get(key.model, [])
        if parts:
            selected[key] = merge_versions(key.model, parts)
    return dataclasses.replace(scrape, models=MappingProxyType(selected))
