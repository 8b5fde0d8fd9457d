"""``tritonwatch rules``: write the Prometheus rules for every model the daemon watches.

One rule set for all models, whatever their number (the config's models do not enter
it): recording rules for every SLO's error ratio over 5m … 3d and burn rate, read from
the SLI counters the daemon exports, and the multiwindow, multi-burn-rate
``TritonSLOBurn`` page and ticket alerts with each model's objective and minimum-events
gate read from its exported series; the group ``tritonwatch-health``
(``TritonServerDown``, ``TritonModelNotServing``, ``TritonwatchCanaryStalled``,
``TritonwatchAbsent``, ``TritonwatchDown``) and ``tritonwatch-capacity``. The config, when
given, sets what is not per model: runbook links, the not-serving hold, the daemon's
scrape job, the capacity thresholds. Load the output with ``rule_files`` and check it with
``promtool check rules``. With ``--out`` it also prints the config's SLOs as the daemon
exports them, laid out for the terminal's width.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from tritonwatch.analysis.slo import SLOSpec, slo_specs
from tritonwatch.commands.rules.capacity import CAPACITY_GROUP
from tritonwatch.commands.rules.generate import SLO_GROUP, render_config_rules
from tritonwatch.commands.rules.health import HEALTH_GROUP
from tritonwatch.common.cli_flags import add_flag
from tritonwatch.common.terminal_table import Column, render_table
from tritonwatch.config import ConfigError, load_config
from tritonwatch.config.schema import Config

EXIT_OK = 0
EXIT_CONFIG_ERROR = 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds the ``rules`` subcommand (its flags also read ``TRITONWATCH_*`` variables)."""
    parser = subparsers.add_parser(
        "rules",
        help="generate Prometheus recording and alerting rules for every watched model",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_flag(parser, "--config", default=None, help="config file (YAML; default: the defaults)")
    add_flag(parser, "--out", default=None, help="write the rules to this file (default: stdout)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Writes the rules for ``args.config`` to ``args.out`` or standard output."""
    try:
        config = load_config(args.config) if args.config else Config()
    except ConfigError as error:
        sys.stderr.write(f"{error}\n")
        return EXIT_CONFIG_ERROR
    text = render_config_rules(config)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        groups = yaml.safe_load(text)["groups"]
        (slo,) = (group for group in groups if group["name"] == SLO_GROUP)
        title = (
            f"wrote {len(groups)} rule groups to {args.out} ({SLO_GROUP}: "
            f"{len(slo['rules'])} rules for every model, {HEALTH_GROUP}, {CAPACITY_GROUP}); "
            "the config's SLOs reach them as the daemon's series:"
        )
        sys.stdout.write("\n".join(summary_lines(slo_specs(config), title)) + "\n")
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
    Column("min bad events", 3),
)


def summary_lines(
    specs: list[SLOSpec], title: str | None = None, width: int | None = None
) -> list[str]:
    """One row per SLO of the config (what the daemon exports for it: the objective and
    gate its rules read), in lines that fit ``width`` (default: the terminal's)."""
    rows = []
    for spec in specs:
        threshold = spec.threshold_seconds
        rows.append(
            (
                f"{spec.target}/{spec.model}",
                str(spec.kind),
                f"{spec.objective * 100:.10g}",
                "-" if threshold is None else f"{threshold * 1e3:g}",
                f"{spec.period_seconds / 86400:g}",
                f"{spec.error_budget * 100:.10g}",
                f"{spec.min_bad_events:g}",
            )
        )
    return render_table(SUMMARY_COLUMNS, rows, width, title)
