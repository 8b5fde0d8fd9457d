"""Writes the parts of the documentation that are read off the code, or checks them.

Each generated part sits in a Markdown file between ``<!-- generated: NAME -->`` and
``<!-- end: NAME -->``; everything outside the markers is written by hand. ``--check``
exits 1 naming every part that differs from what the code says now (the suite runs it,
so a package, a contract or a change that is not in the documents fails a test).

    python scripts/generate_docs.py [--check]
"""

from __future__ import annotations

import argparse
import ast
import functools
import re
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "src" / "tritonwatch"
MARKER = re.compile(
    r"(<!-- generated: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- end: (?P=name) -->)", re.S
)


def packages() -> list[str]:
    """Every package under ``src/tritonwatch``, dotted, parents before children."""
    found = sorted(path.parent.relative_to(PACKAGE.parent) for path in PACKAGE.rglob("__init__.py"))
    return [".".join(path.parts) for path in found if len(path.parts) > 1]


def _summary(package: str) -> str:
    """The first sentence of a package's docstring, on one line."""
    source = (PACKAGE.parent.joinpath(*package.split(".")) / "__init__.py").read_text()
    docstring = ast.get_docstring(ast.parse(source)) or ""
    paragraph = " ".join(docstring.split("\n\n", 1)[0].split())
    match = re.match(r"(.+?\.)(\s|$)", paragraph)
    return match.group(1) if match else paragraph


def _contracts() -> list[dict[str, Any]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def _layer_of(package: str) -> str:
    """Where ``package`` stands in the top-level layers contract (1 = top)."""
    top = package.split(".")[1]
    for contract in _contracts():
        if contract["type"] == "layers" and contract.get("containers") == ["tritonwatch"]:
            for index, layer in enumerate(contract["layers"], start=1):
                if top in [name.strip() for name in str(layer).split("|")]:
                    return str(index)
    return "—"


def _modules(package: str) -> int:
    folder = PACKAGE.parent.joinpath(*package.split("."))
    return sum(1 for path in folder.glob("*.py") if path.name != "__init__.py")


def package_table() -> str:
    rows = ["| package | layer | modules | what it holds |", "|---|---|---|---|"]
    for package in packages():
        name = package.removeprefix("tritonwatch.")
        rows.append(
            f"| `{name}` | {_layer_of(package)} | {_modules(package)} | {_summary(package)} |"
        )
    return "\n".join(rows) + "\n"


def _names(modules: list[str]) -> str:
    return ", ".join(f"`{str(module).removeprefix('tritonwatch.')}`" for module in modules)


def _rule(contract: dict[str, Any]) -> str:
    kind = contract["type"]
    if kind == "layers":
        layers = [
            " \\| ".join(f"`{n.strip()}`" for n in str(layer).split("|"))
            for layer in contract["layers"]
        ]
        container = _names(contract["containers"])
        extra = "; every package is in a layer" if contract.get("exhaustive") else ""
        return (
            f"in {container}: " + " → ".join(layers) + f" (each imports only those after it{extra})"
        )
    if kind == "forbidden":
        sources = contract["source_modules"]
        verb = "imports" if len(sources) == 1 else "import"
        return f"{_names(sources)} {verb} none of {_names(contract['forbidden_modules'])}"
    if kind == "acyclic_siblings":
        under = _names(contract["ancestors"])
        return f"no import cycle among the siblings of any package under {under}"
    return str(kind)


def contract_table() -> str:
    rows = ["| contract | rule |", "|---|---|"]
    for contract in _contracts():
        assert "ignore_imports" not in contract, (
            f"{contract['name']}: a back edge is fixed, not excused"
        )
        rows.append(f"| {contract['name']} | {_rule(contract)} |")
    return "\n".join(rows) + "\n"


THREAD_MAKERS = {
    "Thread": "thread",
    "Timer": "timer thread",
    "ThreadPoolExecutor": "thread pool",
    "BackgroundScheduler": "scheduler thread",
    "Process": "process",
    "Popen": "process",
    "to_thread": "asyncio default executor",
    "run_in_executor": "asyncio default executor",
    "insecure_channel": "grpc channel",
    "secure_channel": "grpc channel",
}
"""Calls that start a thread, a process, or something that runs on threads of its own
(a gRPC channel's C core), by the last part of the called name."""
EXACT_MAKERS = {
    "asyncio.run": "event loop",
    "asyncio.Runner": "event loop",
    "asyncio.new_event_loop": "event loop",
    "grpc.aio.server": "grpc server",
    "subprocess.run": "process",
}
"""Calls that count by their whole name (an event loop runs on the calling thread)."""
LOCK_MAKERS = {"Lock", "RLock", "Condition"}
"""Lock constructors of :mod:`threading` and :mod:`asyncio` (a condition holds a lock)."""


def _called(node: ast.Call) -> str:
    """The dotted name a call calls (``grpc.aio.insecure_channel``), or ``""``."""
    return ast.unparse(node.func) if isinstance(node.func, ast.Name | ast.Attribute) else ""


def _thread_kind(called: str) -> str | None:
    return EXACT_MAKERS.get(called) or THREAD_MAKERS.get(called.rsplit(".", 1)[-1])


def _thread_name(node: ast.Call) -> str:
    """The ``name=`` a thread is given, an f-string's fields kept as ``{...}``."""
    for keyword in node.keywords:
        if keyword.arg == "name":
            value = keyword.value
            if isinstance(value, ast.Constant):
                return str(value.value)
            if isinstance(value, ast.JoinedStr):
                return "".join(
                    str(part.value)
                    if isinstance(part, ast.Constant)
                    else "{" + ast.unparse(getattr(part, "value", part)) + "}"
                    for part in value.values
                )
    return "—"


Sites = tuple[list[tuple[str, str, str]], list[tuple[str, str]], list[tuple[str, str]]]


class _Sites(ast.NodeVisitor):
    """Walks one module for the calls that start threads and processes, the locks, and
    each lock taken (``with``) while the same function holds another of its object's."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.scope: list[str] = []
        self.classes: list[str] = []
        self.holding: list[str] = []
        self.threads: list[tuple[str, str, str]] = []
        self.locks: list[tuple[str, str]] = []
        self.nested: list[tuple[str, str]] = []

    def _key(self, *names: str) -> str:
        return f"{self.module}::" + ".".join([*self.scope, *names])

    def _attribute_key(self, expression: ast.expr) -> str | None:
        """``module::Class.attribute`` for ``self.attribute`` inside a class, else None."""
        text = ast.unparse(expression)
        if not text.startswith("self.") or not self.classes:
            return None
        return f"{self.module}::{self.classes[-1]}.{text.removeprefix('self.')}"

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.classes.append(".".join(self.scope))
        if any(ast.unparse(base).endswith("ThreadingMixIn") for base in node.bases):
            self.threads.append((self._key(), "thread per request", "—"))
        self.generic_visit(node)
        self.classes.pop()
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        holding, self.holding = self.holding, []
        self.generic_visit(node)
        self.holding = holding
        self.scope.pop()

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.visit_FunctionDef(node)

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        taken = [
            key
            for item in node.items
            if (key := self._attribute_key(item.context_expr)) is not None
        ]
        self.nested += [(outer, inner) for outer in self.holding for inner in taken]
        self.holding += taken
        self.generic_visit(node)
        del self.holding[len(self.holding) - len(taken) :]

    def visit_AsyncWith(self, node: ast.AsyncWith) -> None:
        self.visit_With(node)

    def visit_Call(self, node: ast.Call) -> None:
        kind = _thread_kind(_called(node))
        if kind is not None:
            self.threads.append((self._key(), kind, _thread_name(node)))
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        value = node.value
        if isinstance(value, ast.Call) and _called(value).rsplit(".", 1)[-1] in LOCK_MAKERS:
            for target in node.targets:
                key = self._attribute_key(target) or self._key(ast.unparse(target))
                self.locks.append((key, _called(value)))
        self.generic_visit(node)


@functools.cache
def concurrency_sites() -> Sites:
    """What ``src/tritonwatch`` runs concurrently, read off its source:

    * every thread or process started, or anything with threads of its own, as
      ``(key, kind, name)``, the key ``module::Class.function`` where it starts;
    * every lock, as ``(key, constructor)``, the key ``module::Class.attribute``;
    * every pair ``(outer, inner)`` of an object's locks taken one inside the other.
    """
    threads: list[tuple[str, str, str]] = []
    locks: list[tuple[str, str]] = []
    nested: list[tuple[str, str]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        sites = _Sites(path.relative_to(PACKAGE).as_posix())
        sites.visit(ast.parse(path.read_text()))
        threads += sites.threads
        locks += sites.locks
        nested += sites.nested
    lock_keys = {key for key, _ in locks}
    nested = [pair for pair in nested if pair[0] in lock_keys and pair[1] in lock_keys]
    # both branches of an ``if`` (a TLS channel or a plain one) are one row
    return list(dict.fromkeys(threads)), list(dict.fromkeys(locks)), list(dict.fromkeys(nested))


def thread_table() -> str:
    """Three tables: where threads and processes start, the locks, the nested locks."""
    threads, locks, nested = concurrency_sites()
    rows = ["| where it starts | what | name |", "|---|---|---|"]
    rows += [f"| `{key}` | {kind} | `{name}` |" for key, kind, name in threads]
    rows += ["", "| lock | made by |", "|---|---|"]
    rows += [f"| `{key}` | `{made}` |" for key, made in locks]
    rows += ["", "| taken first | then, in the same function |", "|---|---|"]
    rows += [f"| `{outer}` | `{inner}` |" for outer, inner in nested]
    return "\n".join(rows) + "\n"


def _reference(name: str) -> Callable[[], str]:
    """A part from scripts/references.py (imported only when a document asks for it: the
    metrics part runs the daemon against the simulator)."""

    def part() -> str:
        sys.path.insert(0, str(REPO / "scripts"))
        import references  # noqa: PLC0415

        table: str = getattr(references, f"{name}_tables")()
        return table

    return functools.cache(part)


PARTS: dict[str, Callable[[], str]] = {
    "packages": package_table,
    "contracts": contract_table,
    "threads": thread_table,
    "metrics": _reference("metric"),
    "config": _reference("config"),
    "cli": _reference("cli"),
    "alerts": _reference("alert"),
}
DOCUMENTS = [
    REPO / "docs" / "architecture.md",
    *(
        REPO / "docs" / "reference" / f"{name}.md"
        for name in ("metrics", "configuration", "cli", "alerts")
    ),
]


def regenerate(text: str, path: Path) -> str:
    """``text`` with every generated part written afresh."""

    def fresh(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in PARTS:
            raise SystemExit(f"{path}: no generator for the part {name!r}")
        return f"{match.group(1)}{PARTS[name]()}{match.group(4)}"

    return MARKER.sub(fresh, text)


def stale_parts(documents: list[Path] | None = None) -> list[str]:
    """``file: part`` for every generated part of ``documents`` (all by default) that
    differs from the code."""
    stale = []
    for path in DOCUMENTS if documents is None else documents:
        text = path.read_text()
        for match in MARKER.finditer(text):
            name = match.group("name")
            if name in PARTS and match.group("body") != PARTS[name]():
                stale.append(f"{path.relative_to(REPO)}: {name}")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a generated part is stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_parts()
        for part in stale:
            print(f"stale: {part} (run python scripts/generate_docs.py)", file=sys.stderr)
        return 1 if stale else 0
    for path in DOCUMENTS:
        path.write_text(regenerate(path.read_text(), path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
