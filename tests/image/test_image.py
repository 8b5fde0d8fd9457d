"""The image the Dockerfile makes, built and run with podman (``make image-test``).

``scripts/build-image.sh`` builds it on a Debian base made by mmdebstrap and names it in
``TRITONWATCH_IMAGE``; these tests run what it made: ``--version``, ``check-config``,
the unprivileged user, and the daemon itself against the real tritonserver of the
fixtures, on the host network, with a read-only root filesystem — ready, scraping,
canaries answered, and a clean stop on SIGTERM. Without an image (``make test`` builds
none; podman missing) every test skips, saying why.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from real_triton import RealTriton
from support import REPO, free_port, http_get, sample_value, wait_until
from tritonwatch import __version__

pytestmark = pytest.mark.real

IMAGE = os.environ.get("TRITONWATCH_IMAGE", "")
PODMAN = shutil.which("podman")
CONTAINERS_CONF = REPO / "tests" / "image" / "containers.conf"
USER_ID = int(re.search(r"^USER (\d+)$", (REPO / "Dockerfile").read_text(), re.M).group(1))  # type: ignore[union-attr]

if not IMAGE:
    pytest.skip("no image to test: `make image-test` builds one and sets TRITONWATCH_IMAGE",
                allow_module_level=True)  # fmt: skip
if PODMAN is None:
    pytest.skip("podman is not installed (scripts/ensure-image-tools.sh)", allow_module_level=True)


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
    return subprocess.run([PODMAN, *args], capture_output=True, text=True, timeout=timeout,  # type: ignore[list-item]
                          env=env)  # fmt: skip


def _config(path: Path, triton: RealTriton) -> Path:
    path.write_text(
        "scrape: {interval: 2s, timeout: 1s}\n"
        "canary: {rate: 5/s}\n"
        f"targets: [{{name: real, url: '{triton.http_url}', metrics_url: '{triton.metrics_url}',"
        " models: [{name: batching}]}]\n"
    )
    path.chmod(0o644)  # the image's user is not this one
    return path


@pytest.fixture(scope="module")
def triton() -> Iterator[RealTriton]:
    server = RealTriton(["batching"]).start()
    yield server
    server.stop()


def test_the_image_reports_its_version_as_its_unprivileged_user() -> None:
    """Breaks if the image's entry point is not tritonwatch, or it runs as root."""
    version = podman("run", "--rm", IMAGE, "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout == f"tritonwatch {__version__}\n"
    who = podman("run", "--rm", "--entrypoint", "id", IMAGE, "-u")
    assert who.stdout.strip() == str(USER_ID)


def test_check_config_in_the_image_reads_a_mounted_config(
    tmp_path: Path, triton: RealTriton
) -> None:
    """Breaks if the image cannot read a config where its CMD expects one, or exits
    with another status than check-config's."""
    config = _config(tmp_path / "config.yaml", triton)
    checked = podman("run", "--rm", "--read-only", "-v", f"{config}:/etc/tritonwatch/config.yaml:ro",
                     IMAGE, "check-config", "/etc/tritonwatch/config.yaml")  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith("ok: /etc/tritonwatch/config.yaml: 1 target, 1 model")
    broken = tmp_path / "broken.yaml"
    broken.write_text("targets: [{name: x}]\n")
    broken.chmod(0o644)
    refused = podman("run", "--rm", "-v", f"{broken}:/etc/tritonwatch/config.yaml:ro", IMAGE,
                     "check-config", "/etc/tritonwatch/config.yaml")  # fmt: skip
    assert refused.returncode == 2
    assert "/etc/tritonwatch/config.yaml" in refused.stderr and "url" in refused.stderr


def test_the_image_watches_real_triton_read_only_and_stops_cleanly(
    tmp_path: Path, triton: RealTriton
) -> None:
    """Breaks if the daemon in the image cannot run as its user on a read-only root
    filesystem, reach Triton on the host network, become ready, export its canary and
    build info, or stop with status 0 on SIGTERM."""
    config = _config(tmp_path / "config.yaml", triton)
    port = free_port()
    name = f"tritonwatch-test-{port}"
    started = podman(
        "run", "--detach", "--name", name, "--network", "host", "--read-only",
        "--user", str(USER_ID), "--env", f"TRITONWATCH_LISTEN=127.0.0.1:{port}",
        "-v", f"{config}:/etc/tritonwatch/config.yaml:ro", IMAGE,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _status(f"{url}/-/ready") == 200, 60, "the daemon in the image ready")
        text = http_get(f"{url}/metrics")[1]
        assert sample_value(text, "tritonwatch_up", [("target", "real")]) == 1
        wait_until(
            lambda: (sample_value(http_get(f"{url}/metrics")[1], "tritonwatch_canary_requests_total",
                                  [("model", "batching"), ("outcome", "success")]) or 0) >= 3,
            30, "canary successes from the image",
        )  # fmt: skip
        revision = podman("image", "inspect", "--format",
                          "{{range .Config.Env}}{{println .}}{{end}}", IMAGE).stdout  # fmt: skip
        (stated,) = re.findall(r"^TRITONWATCH_REVISION=(.*)$", revision, re.M)
        labels = [("version", __version__), ("revision", stated)]
        assert sample_value(text, "tritonwatch_build_info", labels) == 1
        stopped = podman("stop", "--time", "10", name, timeout=30)
        assert stopped.returncode == 0, stopped.stderr
        code = podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        assert code == "0", podman("logs", name).stderr[-2000:]
        logs = podman("logs", name)
        assert '"event": "stopped"' in logs.stdout + logs.stderr
    finally:
        podman("rm", "--force", name)


def _status(url: str) -> int:
    try:
        return http_get(url, timeout=2)[0]
    except OSError:
        return 0
