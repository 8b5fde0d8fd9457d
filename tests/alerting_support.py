"""A real Alertmanager, a real Prometheus and a webhook receiver for end-to-end tests."""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.error
import urllib.parse
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from support import REPO, free_port, http_get, wait_until

SHIPPED = REPO / "deploy" / "alertmanager" / "alertmanager.yml"
Payload = dict[str, Any]


class WebhookReceiver:
    """A loopback HTTP server that keeps every JSON body posted to it."""

    def __init__(self) -> None:
        self.payloads: list[Payload] = []
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                with receiver._changed:
                    receiver.payloads.append(body)
                    receiver._changed.notify_all()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/alerts"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def alerts(self) -> list[Payload]:
        """Every alert of every payload so far, in arrival order."""
        with self._changed:
            return [alert for payload in self.payloads for alert in payload["alerts"]]

    def wait_for(self, what: str, match: Callable[[Payload], bool], timeout: float = 10) -> Payload:
        """The first alert received that satisfies ``match``."""
        found: Payload = wait_until(
            lambda: next((a for a in self.alerts() if match(a)), None), timeout, what
        )
        return found

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class Alertmanager:
    """``prometheus-alertmanager`` on a loopback port with its own storage."""

    def __init__(self, config: Path, storage: Path, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self._command = [
            "prometheus-alertmanager",
            f"--config.file={config}",
            f"--storage.path={storage}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",  # no gossip: otherwise it waits ~10 s to settle
            "--log.level=warn",
        ]
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        self.process = subprocess.Popen(
            self._command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

        def ready() -> bool:
            try:
                return http_get(f"{self.url}/-/ready", timeout=1)[0] == 200
            except OSError:
                return False

        wait_until(ready, timeout=15, what="Alertmanager ready", every=0.1)

    def alerts(self, **labels: str) -> list[Payload]:
        """The alerts Alertmanager holds now (``GET /api/v2/alerts``) with these labels."""
        matchers = [f'{name}="{value}"' for name, value in labels.items()]
        query = urllib.parse.urlencode([("filter", m) for m in matchers])
        status, body = http_get(f"{self.url}/api/v2/alerts?{query}")
        assert status == 200, body
        found: list[Payload] = json.loads(body)
        return found

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None


def fast_config(receiver_url: str) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(SHIPPED.read_text())
    for route in [config["route"], *config["route"].get("routes", [])]:
        route["group_wait"] = "0s"
        route["group_interval"] = "1s"
    config["receivers"][0]["webhook_configs"][0]["url"] = receiver_url
    return config


class Prometheus:
    """A real Prometheus on a loopback port, scraping ``target`` every second and
    evaluating ``rule_files`` (none by default) every second."""

    def __init__(self, tmp_path: Path, target: str, rule_files: Sequence[Path] = ()) -> None:
        config = tmp_path / "prometheus.yml"
        rules = "".join(f"  - '{path}'\n" for path in rule_files)
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            + (f"rule_files:\n{rules}" if rules else "")
            + "scrape_configs:\n"
            f"  - job_name: tritonwatch\n    static_configs: [{{targets: ['{target}']}}]\n"
        )
        self.url = f"http://127.0.0.1:{free_port()}"
        self.process = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config}",
                f"--web.listen-address={self.url.removeprefix('http://')}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def ready(self) -> bool:
        """True once the HTTP API answers (connection refused before that)."""
        assert self.process.poll() is None, (
            self.process.stderr.read() if self.process.stderr else ""
        )
        try:
            return http_get(f"{self.url}/-/ready", timeout=1)[0] == 200
        except urllib.error.URLError:
            return False

    def get(self, path: str, **params: str) -> dict[str, Any]:
        status, body = http_get(f"{self.url}{path}?{urllib.parse.urlencode(params)}")
        reply: dict[str, Any] = json.loads(body)
        assert status == 200, reply
        return reply

    def query(self, expr: str) -> list[dict[str, Any]]:
        reply = self.get("/api/v1/query", query=expr)
        assert reply["status"] == "success", reply
        result: list[dict[str, Any]] = reply["data"]["result"]
        return result

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()
