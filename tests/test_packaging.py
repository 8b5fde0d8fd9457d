"""The install path a fresh machine and the container image take, checked as files."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

from support import BIN, REPO, TRITONWATCH
from tritonwatch.config.schema import DEFAULT_EXPORTER_LISTEN

pytestmark = pytest.mark.real

DEFAULT_EXPORTER_PORT = int(DEFAULT_EXPORTER_LISTEN.rsplit(":", 1)[1])

DOCKERFILE = (REPO / "Dockerfile").read_text()
MAKEFILE = (REPO / "Makefile").read_text()


def _instructions(name: str) -> list[str]:
    return [
        line.split(None, 1)[1]
        for line in DOCKERFILE.splitlines()
        if line.split(None, 1)[:1] == [name]
    ]


def test_dockerfile_is_multi_stage_non_root_with_the_documented_entrypoint() -> None:
    """Breaks if the image stops being multi-stage and non-root with the documented entrypoint."""
    assert len(_instructions("FROM")) >= 2
    assert _instructions("ENTRYPOINT") == ['["tritonwatch"]']
    assert _instructions("CMD") == ['["run", "--config", "/etc/tritonwatch/config.yaml"]']
    user = _instructions("USER")[-1]
    assert user not in {"root", "0"}
    assert _instructions("EXPOSE") == [str(DEFAULT_EXPORTER_PORT)]
    assert f"TRITONWATCH_LISTEN=0.0.0.0:{DEFAULT_EXPORTER_PORT}" in DOCKERFILE


def test_dockerfile_and_makefile_install_through_the_same_script() -> None:
    """What `make test` exercises is what the image runs: one script, one constraints file."""
    docker_runs = [shlex.split(r) for r in _instructions("RUN") if "install-python.sh" in r]
    assert docker_runs == [["scripts/install-python.sh", "/opt/tritonwatch"]]
    assert re.search(r"^\tscripts/install-python\.sh \$\(VENV\) dev editable$", MAKEFILE, re.M)
    script = (REPO / "scripts" / "install-python.sh").read_text()
    assert '--constraint "$here/constraints.txt"' in script


def test_constraints_pin_every_runtime_dependency() -> None:
    """Breaks if a runtime dependency in pyproject.toml is not pinned in constraints.txt."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    pinned = {
        line.split("==")[0].lower().replace("_", "-")
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if "==" in line
    }
    for requirement in pyproject["project"]["dependencies"]:
        name = re.split(r"[\[<>=!~ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        assert name in pinned, f"{name} is not pinned in constraints.txt"


def test_hadolint_passes() -> None:
    """Breaks if hadolint finds a problem in the Dockerfile."""
    hadolint = str(BIN / "hadolint")
    result = subprocess.run([hadolint, str(REPO / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_ci_runs_the_readme_test_command() -> None:
    """Breaks if CI runs anything but the `make test` the README tells users to run, then
    the image's own test (`make image-test`)."""
    readme = (REPO / "README.md").read_text()
    assert "make test" in readme
    assert "make demo" in readme
    ci = (REPO / ".ci" / "run").read_text()
    assert [
        line for line in ci.splitlines() if line and not line.startswith(("#", "set ", "cd "))
    ] == ["make test", "make image-test"]


def test_console_script_reports_the_version() -> None:
    """Breaks if the installed console script stops printing its version."""
    result = subprocess.run([TRITONWATCH, "--version"], capture_output=True, text=True, check=True)
    assert re.fullmatch(r"tritonwatch \d+\.\d+\.\d+\S*\n", result.stdout)


def test_pip_install_of_the_tree_gives_a_working_command(tmp_path: Path) -> None:
    """Breaks if ``pip install .`` (a wheel built from the tree, not the editable
    install the suite runs from) gives no ``tritonwatch``, or one that cannot start:
    a module or a data file left out of the package, or a broken entry point. The
    wheel goes into a fresh venv without its dependencies, which it reads from this
    one's site-packages (a ``.pth`` line, after its own): the pinned versions, and
    nothing of the checkout."""
    wheels, venv = tmp_path / "wheels", tmp_path / "venv"
    python = str(BIN / "python")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    subprocess.run([python, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
                    str(wheels), str(REPO)], check=True, timeout=300, env=env)  # fmt: skip
    (wheel,) = wheels.glob("tritonwatch-*.whl")
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    ours = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    (site,) = (venv / "lib").glob("python3*/site-packages")
    subprocess.run([python, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                    "--quiet", "--no-deps", "--no-index", str(wheel)], check=True, timeout=300,
                   env=env)  # fmt: skip
    (site / "zz_dependencies.pth").write_text(ours + "\n")
    command = str(venv / "bin" / "tritonwatch")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            args, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env
        )

    version = run(command, "--version")
    assert re.fullmatch(r"tritonwatch \d+\.\d+\.\d+\S*\n", version.stdout), version.stderr
    where = run(
        str(venv / "bin" / "python"), "-c", "import tritonwatch; print(tritonwatch.__file__)"
    )
    assert where.stdout.startswith(str(site)), where.stdout + where.stderr  # the wheel's copy
    checked = run(command, "check-config", str(REPO / "examples" / "demo.yaml"))
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith("ok: ")
