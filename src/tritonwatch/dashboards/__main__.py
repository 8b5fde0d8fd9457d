"""``python -m tritonwatch.dashboards [--out DIR] [--check]``: write the dashboards, or
check that the committed ones are what the code builds."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tritonwatch.dashboards import render_all

DEFAULT_OUT = Path("grafana/dashboards")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tritonwatch.dashboards", description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="dashboard folder")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if a file is missing or differs"
    )
    args = parser.parse_args(argv)
    stale = []
    for filename, text in render_all().items():
        path = args.out / filename
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            sys.stdout.write(f"wrote {path}\n")
    if stale:
        sys.stderr.write(
            "out of date (run python -m tritonwatch.dashboards): " + ", ".join(stale) + "\n"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
