"""``tritonwatch rules``: write the Prometheus rules for the configured SLOs.

Recording rules for each SLO's error ratio over 5m … 3d and its error budget, and the
multiwindow, multi-burn-rate ``TritonSLOBurn`` page and ticket alerts, so Prometheus
alerts even while the daemon is down; and one group, ``tritonwatch-health``, with
``TritonServerDown``, ``TritonModelNotServing``, ``TritonwatchCanaryStalled`` and
``TritonwatchAbsent``. Load the output with ``rule_files`` and check it
with ``promtool check rules``. With ``--out`` it also prints one line per SLO (what was
written), laid out for the terminal's width.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from tritonwatch.analysis.slo import SLOSpec, slo_specs
from tritonwatch.commands.rules.capacity import CAPACITY_GROUP
from tritonwatch.commands.rules.generate import render_config_rules
from tritonwatch.commands.rules.health import HEALTH_GROUP
from tritonwatch.common.cli_flags import add_flag
from tritonwatch.common.terminal_table import Column, render_table
from tritonwatch.config import ConfigError, load_config

EXIT_OK = 0
EXIT_CONFIG_ERROR = 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds the ``rules`` subcommand (its flags also read ``TRITONWATCH_*`` variables)."""
    parser = subparsers.add_parser(
        "rules",
        help="generate Prometheus recording and alerting rules for the configured SLOs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_flag(parser, "--config", required=True, help="config file (YAML)")
    add_flag(parser, "--out", default=None, help="write the rules to this file (default: stdout)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Writes the rules for ``args.config`` to ``args.out`` or standard output."""
    try:
        config = load_config(args.config)
    except ConfigError as error:
        sys.stderr.write(f"{error}\n")
        return EXIT_CONFIG_ERROR
    text = render_config_rules(config)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        groups = yaml.safe_load(text)["groups"]
        title = (
            f"wrote {len(groups)} rule groups to {args.out} "
            f"(the SLOs', {HEALTH_GROUP} and {CAPACITY_GROUP})"
        )
        slos = [group for group in groups if group["name"] not in (HEALTH_GROUP, CAPACITY_GROUP)]
        sys.stdout.write("\n".join(summary_lines(slo_specs(config), slos, title)) + "\n")
    else:
        sys.stdout.write(text)
    return EXIT_OK


SUMMARY_COLUMNS = (
    Column("target/model", align="left"),
    Column("SLO", align="left"),
    Column("objective %"),
    Column("threshold ms", 1),
    Column("period d", 2),
    Column("budget %", 5),
    Column("records", 3),
    Column("alerts", 4),
)
"""The group's name is left out: it is ``tritonwatch-slo-<target>-<model>-<SLO>``."""


def summary_lines(
    specs: list[SLOSpec],
    groups: list[dict[str, Any]],
    title: str | None = None,
    width: int | None = None,
) -> list[str]:
    """One row per SLO and its rule group (``groups`` in ``specs``' order, as written):
    what ``--out`` wrote, in lines that fit ``width`` (default: the terminal's)."""
    rows = []
    for spec, group in zip(specs, groups, strict=True):
        rules = group["rules"]
        alerts = sum(1 for rule in rules if "alert" in rule)
        threshold = spec.threshold_seconds
        rows.append(
            (
                f"{spec.target}/{spec.model}",
                str(spec.kind),
                f"{spec.objective * 100:.10g}",
                "-" if threshold is None else f"{threshold * 1e3:g}",
                f"{spec.period_seconds / 86400:g}",
                f"{spec.error_budget * 100:.10g}",
                str(len(rules) - alerts),
                str(alerts),
            )
        )
    return render_table(SUMMARY_COLUMNS, rows, width, title)
