"""What this build of tritonwatch is: its version, the commit it was built from, its Python.

``tritonwatch_build_info`` carries them, as every Prometheus exporter's ``*_build_info``
does, so a dashboard or an alert can tell which build answers. The revision comes from
``TRITONWATCH_REVISION`` (the image sets it from its ``REVISION`` build argument), else
from the git checkout the package runs from (an editable install, ``make demo``), read
from ``.git`` without running git; else it is ``unknown``.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

from tritonwatch import __version__

UNKNOWN = "unknown"
_SHORT = 12


@dataclass(frozen=True, slots=True)
class BuildFacts:
    version: str
    revision: str
    python: str


def build_facts() -> BuildFacts:
    return BuildFacts(__version__, revision(), platform.python_version())


def revision(start: Path | None = None) -> str:
    """The commit this code was built from, abbreviated; ``unknown`` when nothing says."""
    stated = os.environ.get("TRITONWATCH_REVISION", "").strip()
    if stated:
        return stated[:40]
    for folder in (start or Path(__file__).resolve()).parents:
        git = folder / ".git"
        if git.is_dir():
            return _head_commit(git) or UNKNOWN
    return UNKNOWN


def _head_commit(git: Path) -> str | None:
    """HEAD's commit from the files git keeps: a detached HEAD, a loose ref or a packed one."""
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head[:_SHORT] or None
        ref = head.removeprefix("ref: ")
        loose = git / ref
        if loose.is_file():
            return loose.read_text().strip()[:_SHORT] or None
        packed = git / "packed-refs"
        for line in packed.read_text().splitlines() if packed.is_file() else []:
            commit, _, name = line.partition(" ")
            if name == ref:
                return commit[:_SHORT]
    except OSError:
        return None
    return None
