"""``tritonwatch rules``: write the Prometheus rules for the configured SLOs.

Recording rules for each SLO's error ratio over 5m … 3d and its error budget, and the
multiwindow, multi-burn-rate ``TritonSLOBurn`` page and ticket alerts, so Prometheus
alerts even while the daemon is down. Load the output with ``rule_files`` and check it
with ``promtool check rules``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tritonwatch.cli_flags import add_flag
from tritonwatch.config import ConfigError, load_config
from tritonwatch.rules.generate import render_config_rules

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
    else:
        sys.stdout.write(text)
    return EXIT_OK
