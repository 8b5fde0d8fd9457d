"""``python -m tritonwatch.sim [flags]``: the ``simulate`` command without the main CLI."""

from __future__ import annotations

import argparse
import sys

from tritonwatch.sim import cli


def main(argv: list[str] | None = None) -> int:
    """Parses ``simulate`` flags and runs the simulator."""
    parser = argparse.ArgumentParser(prog="python -m tritonwatch.sim")
    subparsers = parser.add_subparsers(dest="command")
    cli.register(subparsers)
    args = parser.parse_args(["simulate", *(sys.argv[1:] if argv is None else argv)])
    status: int = args.handler(args)
    return status


if __name__ == "__main__":
    sys.exit(main())
