"""Load on purpose (``sweep``, ``tune``) against production needs an explicit yes.

Both commands take ``--config`` (or ``TRITONWATCH_CONFIG``, which a container running
the daemon already has) and refuse a URL that points at a target marked
``production: true`` unless ``--allow-production`` is given.
"""

from __future__ import annotations

import argparse

from tritonwatch.common.cli_flags import add_flag
from tritonwatch.config import ConfigError, load_config


def add_production_flags(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--config", default=None, help="config whose production targets to protect")
    add_flag(
        parser,
        "--allow-production",
        action="store_true",
        help="load a target marked production: true anyway",
    )


def production_refusal(args: argparse.Namespace) -> str | None:
    """Why this command must not run against ``args.url`` (None when it may)."""
    if not args.config or args.allow_production:
        return None
    try:
        config = load_config(args.config)
    except ConfigError as error:
        return str(error)
    target = config.production_target_for(args.url)
    if target is None:
        return None
    return (
        f"target {target.name!r} is marked production: true in {args.config}; "
        "pass --allow-production to load it on purpose"
    )
