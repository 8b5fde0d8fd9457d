"""The documentation site builds strictly, the README stays a way in, and every alert's
runbook link lands on a section that exists in the built site.

``mkdocs build --strict`` fails on a broken link, a missing anchor or a page left out
of the navigation (mkdocs.yml's ``validation``). The runbook links are checked against
the HTML the site has, for every alert the generated rules carry and every alert the
daemon sends itself.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support import REPO
from tritonwatch.analysis.advisor_records import Action
from tritonwatch.commands.rules.generate import render_config_rules
from tritonwatch.config import load_config
from tritonwatch.export import alerts

pytestmark = pytest.mark.real

README_LIMIT_BYTES = 15_000


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    return folder


def _ids(page: Path) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', page.read_text()))


def _runbook_urls() -> dict[str, str]:
    """alert (or action) → runbook_url, from the rules and the daemon's own alerts."""
    urls = {}
    for config in (
        REPO / "deploy" / "compose" / "tritonwatch.yaml",
        REPO / "mixin" / "config.yaml",
    ):
        if not config.exists():
            continue
        for group in yaml.safe_load(render_config_rules(load_config(config)))["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    urls[rule["alert"]] = rule["annotations"]["runbook_url"]
    base = alerts.DEFAULT_RUNBOOK_BASE
    for action in Action:
        urls[f"recommendation {action}"] = f"{base}#{action}"
    for name in (alerts.SLO_BURN, alerts.SERVER_DOWN, alerts.MODEL_NOT_SERVING):
        urls[name] = f"{base}#{name.lower()}"
    urls["experiment verdict"] = f"{base}#experiments"
    return urls


def test_the_site_builds_strictly_with_every_page(site: Path) -> None:
    """Breaks if a page, the references or the runbook are missing from the built site."""
    for page in ("index.html", "runbook/index.html", "reference/metrics/index.html",
                 "reference/configuration/index.html", "reference/cli/index.html",
                 "reference/alerts/index.html", "architecture/index.html"):  # fmt: skip
        assert (site / page).is_file(), page


def test_every_alerts_runbook_link_lands_on_a_section(site: Path) -> None:
    """Breaks if an alert's runbook_url names a section the built runbook does not have
    (an on-call engineer would land at the top of the page, or nowhere)."""
    ids = _ids(site / "runbook" / "index.html")
    urls = _runbook_urls()
    assert {alerts.CANARY_STALLED, alerts.EXPORTER_ABSENT, alerts.SLO_BURN} <= urls.keys()
    for alert, url in urls.items():
        page, _, anchor = url.partition("#")
        assert page == alerts.DEFAULT_RUNBOOK_BASE, (alert, url)
        assert anchor in ids, f"{alert}: no section #{anchor} in the runbook"


def test_a_missing_runbook_section_is_caught(site: Path) -> None:
    """Breaks if the anchor check cannot see a section that does not exist."""
    assert "tritonsloburn" in _ids(site / "runbook" / "index.html")
    assert "no-such-alert" not in _ids(site / "runbook" / "index.html")


def test_the_readme_is_a_way_in_not_the_manual() -> None:
    """Breaks if the README grows past 15 KB, loses the two commands or the pip start,
    or a work plan comes back into the user documentation."""
    readme = (REPO / "README.md").read_text()
    assert len(readme.encode()) <= README_LIMIT_BYTES
    for needed in ("make demo", "make test", "pip install .", "tritonwatch --version"):
        assert needed in readme
    assert not (REPO / "docs" / "plans").exists()
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO / link).is_file(), link
