"""``make mutation``: mutmut over the modules that carry the promises, scored per module.

The modules are ``[tool.mutmut] only_mutate`` in pyproject.toml. mutmut copies the
source into ``mutants/`` (git-ignored), makes every mutant of every function there
(an operator swapped, a constant changed, an argument dropped, a string altered), runs
the unit and sim tests once to learn which tests reach which function, then runs, for
each mutant, only the tests that reached its function. A mutant is *killed* when one
of them fails (or it hangs past mutmut's limit, or crashes the test process).

This script starts from a fresh ``mutants/`` (the results describe this tree, not a
cache), runs ``mutmut run``, and writes ``mutation/RESULTS.md``: per module, the
mutants, those listed as equivalent in ``mutation/equivalents.toml`` (each with the
reason it cannot change behaviour), those killed, and the score

    killed / (mutants − equivalent)

with the run's date, commit and duration, and every mutant that survived with its
diff. The exit status is 1 when a module scores under :data:`GOAL`, or an equivalent
listed no longer matches its mutant (its module changed: look at it again).

    python mutation/run.py [--max-children N] [--report-only]

``--report-only`` rewrites the report from the ``mutants/`` a run left (after
``mutmut run NAME…`` retried some mutants by hand); the report says so.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

from mutmut.mutation.data import SourceFileMutationData
from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.stats import status_by_exit_code

REPO = Path(__file__).resolve().parent.parent
HERE = REPO / "mutation"
RESULTS = HERE / "RESULTS.md"
EQUIVALENTS = HERE / "equivalents.toml"
GOAL = 0.90
"""The share of non-equivalent mutants each module's tests must kill."""

CAUGHT = frozenset({"killed", "timeout", "segfault"})
"""mutmut's verdicts that mean the tests noticed the mutant: a test failed, the tests
hung past the limit, or the test process died."""


@dataclass(frozen=True, slots=True)
class Equivalent:
    """A mutant that cannot change behaviour (mutation/equivalents.toml)."""

    mutant: str
    change: str
    """Part of a line the mutant has and the original has not (checked against its diff)."""
    reason: str


@dataclass(slots=True)
class ModuleScore:
    path: str
    statuses: dict[str, str] = field(default_factory=dict)
    """mutant name → mutmut's verdict."""
    equivalent: set[str] = field(default_factory=set)

    @property
    def scored(self) -> list[str]:
        return [name for name in self.statuses if name not in self.equivalent]

    @property
    def killed(self) -> int:
        return sum(self.statuses[name] in CAUGHT for name in self.scored)

    @property
    def survivors(self) -> list[str]:
        return sorted(name for name in self.scored if self.statuses[name] not in CAUGHT)

    @property
    def score(self) -> float:
        return self.killed / len(self.scored) if self.scored else 1.0


def mutated_paths() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"]
    return list(config["only_mutate"])


def load_equivalents() -> list[Equivalent]:
    if not EQUIVALENTS.exists():
        return []
    data = tomllib.loads(EQUIVALENTS.read_text())
    return [Equivalent(e["mutant"], e["change"], e["reason"]) for e in data.get("equivalent", [])]


def run_mutmut(max_children: int) -> float:
    """A fresh ``mutmut run``; returns its wall time in seconds."""
    shutil.rmtree(REPO / "mutants", ignore_errors=True)
    mutmut = Path(sys.executable).parent / "mutmut"
    started = time.monotonic()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
    }
    command = [str(mutmut), "run", "--max-children", str(max_children)]
    subprocess.run(command, cwd=REPO, env=env, check=True)
    return time.monotonic() - started


def collect(paths: list[str]) -> dict[str, ModuleScore]:
    """Every mutant's verdict from ``mutants/``, by module path (mutmut's own records)."""
    scores = {}
    for path in paths:
        data = SourceFileMutationData(path=Path(path))
        data.load()
        statuses = {name: status_by_exit_code[code] for name, code in data.exit_code_by_key.items()}
        scores[path] = ModuleScore(path, statuses)
    return scores


def diff_of(name: str, path: str) -> str:
    return str(get_diff_for_mutant(name, path=path))


def added_lines(diff: str) -> list[str]:
    return [
        line[1:].strip()
        for line in diff.splitlines()
        if line.startswith("+") and not line.startswith("+++")
    ]


def apply_equivalents(scores: dict[str, ModuleScore], equivalents: list[Equivalent]) -> list[str]:
    """Marks each listed equivalent that still matches its mutant; returns the problems
    with the others (unknown name, or a mutant that no longer makes that change)."""
    by_name = {name: score for score in scores.values() for name in score.statuses}
    problems = []
    for equivalent in equivalents:
        score = by_name.get(equivalent.mutant)
        if score is None:
            problems.append(f"{equivalent.mutant}: no such mutant")
            continue
        lines = added_lines(diff_of(equivalent.mutant, score.path))
        if not any(equivalent.change.strip() in line for line in lines):
            problems.append(f"{equivalent.mutant}: no longer changes `{equivalent.change}`")
            continue
        score.equivalent.add(equivalent.mutant)
    return problems


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()


def mutmut_version() -> str:
    return version("mutmut")


def report(
    scores: dict[str, ModuleScore],
    problems: list[str],
    seconds: float | None,
    max_children: int,
) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    commit = git("rev-parse", "--short=12", "HEAD")
    dirty = git("status", "--porcelain", "--", "src", "tests", "pyproject.toml")
    state = "with uncommitted changes to src/, tests/ or pyproject.toml" if dirty else "clean"
    duration = (
        "not a fresh run: rewritten from the mutants/ an earlier run left (--report-only)"
        if seconds is None
        else f"{seconds / 60:.1f} min wall time, {max_children} mutants at a time, "
        f"on {os.cpu_count()} cores"
    )
    lines = [
        "# Mutation testing: results",
        "",
        "Written by `make mutation` (mutation/run.py); do not edit by hand. What it runs,",
        "when to run it and how to read this page: tests/README.md, *Mutation testing*.",
        "",
        f"- **Run**: {now}, commit `{commit}` ({state})",
        f'- **Tool**: mutmut {mutmut_version()}; tests `-m "unit or sim"`, for each mutant',
        "  those that reached its function",
        f"- **Time**: {duration}",
        f"- **Score**: killed / (mutants − equivalent); goal: at least {GOAL:.0%} for each module",
        "",
        "| module | mutants | equivalent | killed | survived | no tests | timeout | score |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for score in scores.values():
        counts = Counter(score.statuses[name] for name in score.scored)
        mark = "" if score.score >= GOAL else " ✗"
        lines.append(
            f"| `{score.path.removeprefix('src/tritonwatch/')}` | {len(score.statuses)} "
            f"| {len(score.equivalent)} | {score.killed} | {counts['survived']} "
            f"| {counts['no tests']} | {counts['timeout']} | {score.score:.1%}{mark} |"
        )
    others = Counter(
        score.statuses[name]
        for score in scores.values()
        for name in score.scored
        if score.statuses[name] not in {"killed", "survived", "no tests", "timeout"}
    )
    if others:
        lines += [
            "",
            "Other verdicts: " + ", ".join(f"{k}: {v}" for k, v in sorted(others.items())),
        ]
    if problems:
        lines += ["", "## Equivalents that no longer match (not excluded)", ""]
        lines += [f"- {problem}" for problem in problems]
    lines += ["", "## Surviving mutants", ""]
    survivors = [(score, name) for score in scores.values() for name in score.survivors]
    if not survivors:
        lines.append("None.")
    for score, name in survivors:
        lines += [
            f"`{name}` ({score.statuses[name]})",
            "",
            "```diff",
            diff_of(name, score.path),
            "```",
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    os.chdir(REPO)
    seconds = None if args.report_only else run_mutmut(args.max_children)
    scores = collect(mutated_paths())
    problems = apply_equivalents(scores, load_equivalents())
    RESULTS.write_text(report(scores, problems, seconds, args.max_children))
    print(f"wrote {RESULTS.relative_to(REPO)}")
    low = [s.path for s in scores.values() if s.score < GOAL]
    for score in scores.values():
        print(f"{score.score:7.1%}  {score.killed}/{len(score.scored)}  {score.path}")
    if low or problems:
        print(f"under {GOAL:.0%}: {', '.join(low) or 'none'}; stale equivalents: {len(problems)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
