"""The exporter's management endpoints and build info, on the real ``tritonwatch run``
process: ``/-/healthy``, ``/-/ready``, ``POST /-/reload`` (with and without
``--web.enable-lifecycle``) and ``tritonwatch_build_info{version,revision,python}``,
answered as Prometheus and Alertmanager answer them."""

from __future__ import annotations

import platform
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sim_process import SimProcess
from support import REPO, DaemonProcess, http_get, sample_value, wait_until
from tritonwatch import __version__
from tritonwatch.common.build_facts import revision

pytestmark = pytest.mark.real


def _request(url: str, method: str) -> tuple[int, str, dict[str, str]]:
    request = urllib.request.Request(
        url, method=method, data=b"" if method in {"POST", "PUT"} else None
    )
    try:
        with urllib.request.urlopen(request, timeout=35) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), dict(error.headers)


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A loopback server that accepts connections and never answers: a first scrape and
    a first canary request there end only at their timeouts."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for connection in held:
        connection.close()
    listener.close()


def _config(
    path: Path, url: str, metrics_url: str, models: list[str], timeout: str, interval: str = "5s"
) -> Path:
    listed = ", ".join(f"{{name: {model}}}" for model in models)
    path.write_text(
        f"scrape: {{interval: {interval}, timeout: {timeout}}}\n"
        f"canary: {{rate: 5/s, timeout: {timeout}}}\n"
        f"targets: [{{name: t, url: '{url}', metrics_url: '{metrics_url}', models: [{listed}]}}]\n"
    )
    return path


def test_healthy_at_once_ready_once_every_first_scrape_and_canary_answer_are_in(
    tmp_path: Path, silent_url: str
) -> None:
    """Breaks if /-/ready says ready before the first scrape and canary answer (a
    Kubernetes readiness probe would route to an exporter with nothing true to say), or
    never after they ended (failures count: a down server is something true), or if
    /-/healthy is not 200 from the start."""
    # The canary's reason shows until its metadata request to the silent server times out
    # (the canary is then excused as unprepared): 8 s, so that a loaded host that starts
    # the daemon slowly still sees the window open.
    path = _config(
        tmp_path / "c.yaml", silent_url, f"{silent_url}/metrics", ["simple"], "8s", "10s"
    )
    daemon = DaemonProcess(path)
    try:
        status, body = http_get(f"{daemon.url}/-/healthy")
        assert (status, body) == (200, "tritonwatch is Healthy.\n")
        # Until the daemon has started /-/ready says so; then, until the silent server's
        # first scrape and canary request time out, what it waits for.
        status, body = wait_until(
            lambda: (answer := http_get(f"{daemon.url}/-/ready"))[1].count("the first") and answer,
            20,
            "the started daemon's reasons",
        )
        assert status == 503
        lines = body.splitlines()
        assert lines[0] == "tritonwatch is not ready."
        assert "waiting for the first scrape of t" in lines
        assert "waiting for the first canary answer of t/simple (http)" in lines
        wait_until(
            lambda: http_get(f"{daemon.url}/-/ready")[0] == 200, 40, "ready after the timeouts"
        )
        assert http_get(f"{daemon.url}/-/ready") == (200, "tritonwatch is Ready.\n")
        head = _request(f"{daemon.url}/-/healthy", "HEAD")
        assert (head[0], head[1]) == (200, "")
    finally:
        daemon.stop()


def test_reload_is_refused_unless_the_lifecycle_api_is_on(tmp_path: Path, closed_url: str) -> None:
    """Breaks if POST /-/reload reloads without --web.enable-lifecycle (anyone who can
    reach the port could), or answers other than Prometheus does."""
    path = _config(tmp_path / "c.yaml", closed_url, f"{closed_url}/metrics", ["simple"], "200ms")
    daemon = DaemonProcess(path)
    try:
        status, body, _ = _request(f"{daemon.url}/-/reload", "POST")
        assert (status, body) == (403, "Lifecycle API is not enabled.\n")
        status, _, headers = _request(f"{daemon.url}/-/reload", "GET")
        assert status == 405
        assert headers["Allow"] == "POST, PUT"
        assert not [e for e in daemon.events if e.get("event", "").startswith("config_reload")]
    finally:
        daemon.stop()


def test_post_reload_is_sighups_reload_and_says_how_it_went(tmp_path: Path) -> None:
    """Breaks if POST /-/reload with the lifecycle API on does not put a new config in
    force and answer 200, or if a broken config is not refused with 500, the old one
    kept and tritonwatch_config_last_reload_successful set to 0."""
    with SimProcess() as sim:
        path = _config(tmp_path / "c.yaml", sim.http_url, sim.metrics_url, ["simple"], "1s")
        daemon = DaemonProcess(path, "--web.enable-lifecycle")
        try:
            wait_until(
                lambda: sample_value(
                    daemon.metrics(),
                    "tritonwatch_canary_requests_total",
                    [("model", "simple"), ("outcome", "success")],
                ),
                15,
                "the first model's canary",
            )
            _config(path, sim.http_url, sim.metrics_url, ["simple", "resnet50"], "1s")
            status, body, _ = _request(f"{daemon.url}/-/reload", "PUT")
            assert (status, body) == (200, "")
            daemon.wait_for_event("config_reloaded", targets=1)
            wait_until(
                lambda: sample_value(
                    daemon.metrics(),
                    "tritonwatch_canary_requests_total",
                    [("model", "resnet50"), ("outcome", "success")],
                ),
                15,
                "the reloaded config's new model",
            )
            path.write_text("targets: [{name: t, url: 'not a url'}]\n")
            status, body, _ = _request(f"{daemon.url}/-/reload", "POST")
            assert status == 500
            assert body.startswith("failed to reload config")
            text = daemon.metrics()
            assert sample_value(text, "tritonwatch_config_last_reload_successful") == 0
            assert sample_value(text, "tritonwatch_canary_requests_total",
                                [("model", "resnet50"), ("outcome", "success")])  # fmt: skip
        finally:
            daemon.stop()


def test_build_info_says_version_revision_and_python(tmp_path: Path, closed_url: str) -> None:
    """Breaks if tritonwatch_build_info loses a label or states another build: here, the
    checkout's HEAD commit (read from .git) and this Python."""
    path = _config(tmp_path / "c.yaml", closed_url, f"{closed_url}/metrics", ["simple"], "200ms")
    daemon = DaemonProcess(path, env={"TRITONWATCH_REVISION": ""})
    try:
        expected = revision(REPO / "src" / "tritonwatch" / "__init__.py")
        assert expected != "unknown" and len(expected) == 12
        labels = [("version", __version__), ("revision", expected),
                  ("python", platform.python_version())]  # fmt: skip
        assert sample_value(daemon.metrics(), "tritonwatch_build_info", labels) == 1
    finally:
        daemon.stop()
