"""Parse speed: our Triton parser against prometheus_client's, on the same 500-model page.

The page is built from the shapes of the real scrapes in ``tests/fixtures``: every
per-model family (counters, failures by reason, pending and load-time gauges, five
summaries with the default quantiles, some idle at ``Nan``), one in five models split
by ``gpu_uuid`` over two GPUs, the GPU, CPU and pinned-memory gauges, and a backend
family we do not model. Both parsers read the same text in the same run; each figure
is the median CPU time of several alternating repeats. prometheus_client's generator
is consumed to the last sample, otherwise it does no work.

Run: ``.venv/bin/python benchmarks/parse_speed.py [--models 500] [--repeats 7]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from tritonwatch.scrape.triton_families import (
    FAILURE_REASONS,
    FAMILIES,
    Kind,
    Scope,
)
from tritonwatch.scrape.triton_text import parse_triton_metrics

_GPUS = [f"GPU-{index:08x}-0aa1-a28c-60bf-6794365cf262" for index in range(4)]
_QUANTILES = ("0.5", "0.9", "0.95", "0.99", "0.999")


def _model_label_sets(index: int) -> list[str]:
    base = f'model="model_{index:04d}",version="1"'
    if index % 5:
        return [base]
    # Old servers split per-model series by GPU; Triton sorts label names.
    return [f'gpu_uuid="{uuid}",model="model_{index:04d}",version="1"' for uuid in _GPUS[:2]]


def _value(index: int, family_number: int, six_decimals: bool) -> str:
    number = (index + 1) * 1000 + family_number * 37
    return f"{number:.6f}" if six_decimals else str(number)


def build_page(models: int) -> str:
    """A Triton page with ``models`` models, every family of the table populated."""
    lines: list[str] = []
    for number, family in enumerate(FAMILIES):
        lines += [f"# HELP {family.name} {family.help}", f"# TYPE {family.name} {family.kind}"]
        if family.scope is Scope.GPU:
            lines += [f'{family.name}{{gpu_uuid="{uuid}"}} {number}.5' for uuid in _GPUS]
        elif family.scope is Scope.SERVER:
            lines.append(f"{family.name} {number * 1000}")
        elif family.kind is Kind.HISTOGRAM:
            continue  # decoupled models only; not part of this page
        else:
            for index in range(models):
                value = _value(index, number, six_decimals=index % 2 == 0)
                for labels in _model_label_sets(index):
                    lines += _model_lines(family.name, family.kind, labels, index, value)
    lines += ["# TYPE nv_trt_llm_request_metrics gauge"]
    lines += [f'nv_trt_llm_request_metrics{{request_type="active{i}"}} {i}' for i in range(20)]
    return "\n".join(lines) + "\n"


def _model_lines(name: str, kind: Kind, labels: str, index: int, value: str) -> list[str]:
    if kind is Kind.SUMMARY:
        idle = index % 7 == 0
        out = [f"{name}_count{{{labels}}} {value}", f"{name}_sum{{{labels}}} {value}"]
        out += [f'{name}{{{labels},quantile="{q}"}} {"Nan" if idle else value}' for q in _QUANTILES]
        return out
    if name == "nv_inference_request_failure":
        model, version = labels.rsplit(",", 1)
        return [f'{name}{{{model},reason="{r}",{version}}} {value}' for r in FAILURE_REASONS]
    return [f"{name}{{{labels}}} {value}"]


def _prometheus_client(page: str) -> int:
    return sum(len(family.samples) for family in text_string_to_metric_families(page))


def _ours(page: str) -> int:
    return parse_triton_metrics(page, 0.0).samples


def _timings(
    parsers: dict[str, Callable[[str], int]], page: str, repeats: int
) -> dict[str, list[float]]:
    """CPU seconds of each parser per repeat; runs alternate so both see the same load."""
    timings: dict[str, list[float]] = {name: [] for name in parsers}
    for _ in range(repeats):
        for name, parse in parsers.items():
            started = time.process_time()
            parse(page)
            timings[name].append(time.process_time() - started)
    return timings


def _median_seconds(
    parsers: dict[str, Callable[[str], int]], page: str, repeats: int
) -> dict[str, float]:
    """Median CPU time of each parser; runs alternate so both see the same machine load."""
    timings = _timings(parsers, page, repeats)
    return {name: statistics.median(values) for name, values in timings.items()}


@dataclass(frozen=True)
class ParseResult:
    """The page and, per repeat, each parser's CPU seconds (paired: same repeat, same load)."""

    models: int
    lines: int
    megabytes: float
    ours_samples: int
    reference_samples: int
    ours_seconds: list[float]
    reference_seconds: list[float]


def measure(models: int = 500, repeats: int = 7) -> ParseResult:
    """Builds the page and times both parsers on it, alternating, ``repeats`` times."""
    page = build_page(models)
    timings = _timings({"ours": _ours, "reference": _prometheus_client}, page, repeats)
    return ParseResult(
        models, page.count("\n"), len(page) / 1e6, _ours(page), _prometheus_client(page),
        timings["ours"], timings["reference"],
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    result = measure(args.models, args.repeats)
    ours = statistics.median(result.ours_seconds)
    reference = statistics.median(result.reference_seconds)
    print(f"page: {args.models} models, {result.lines} lines, {result.megabytes:.2f} MB")
    print(
        f"samples read: tritonwatch {result.ours_samples}, "
        f"prometheus_client {result.reference_samples}"
    )
    print(f"prometheus_client.parser  {reference * 1e3:8.1f} ms  (median of {args.repeats})")
    print(f"tritonwatch parser        {ours * 1e3:8.1f} ms  (median of {args.repeats})")
    print(f"ratio ours / reference    {ours / reference:8.3f}  (goal ≤ 0.2)")


if __name__ == "__main__":
    main()
