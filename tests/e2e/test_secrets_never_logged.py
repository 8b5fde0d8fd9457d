"""A whole daemon run with every kind of secret configured, all of its output captured
at debug level and searched: no secret may appear, in any encoding a log could use.

The secrets are exercised, not only configured: the Alertmanager password and bearer
token travel with deliveries to an Alertmanager that is down (so the failures, which
quote URLs and errors, are logged), the webhook's secret path receives the alert, and
the exporter's basic auth answers right and wrong passwords.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import time
from pathlib import Path

import bcrypt
import pytest
import requests

from alerting_support import WebhookReceiver
from support import TRITONWATCH, free_port, wait_until
from tritonwatch.sim.server import Simulator

pytestmark = pytest.mark.real

AM_PASSWORD = "am-pa55-Zq8vX1"
WEBHOOK_PATH = "T0SECRET/B0SECRET/x9Yq2Lw7"
SCRAPE_PASSWORD = "scr4pe-Kp3mN8"
WRONG_PASSWORD = "wr0ng-Hh5tR2"


def _forms(secret: str) -> list[str]:
    """The secret as logs might carry it: plain, URL-quoted, base64, in a Basic header."""
    return [
        secret,
        requests.utils.quote(secret, safe=""),
        base64.b64encode(secret.encode()).decode(),
    ]


def test_no_secret_reaches_the_logs(tmp_path: Path) -> None:
    """No configured secret shows in a debug-level daemon's logs or command line, in any form."""
    receiver = WebhookReceiver()
    password_file = tmp_path / "am-password"
    password_file.write_text(AM_PASSWORD + "\n")
    web_config = tmp_path / "web.yml"
    hashed = bcrypt.hashpw(SCRAPE_PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    web_config.write_text(f"basic_auth_users: {{prom: '{hashed}'}}\n")
    log_path = tmp_path / "daemon.log"
    port = free_port()
    with Simulator(scenario="queue-delay-too-high") as sim:
        config = tmp_path / "tritonwatch.yaml"
        config.write_text(
            f"""
targets:
  - {{name: sim, url: {sim.http_url}, metrics_url: {sim.metrics_url}, models: [{{name: resnet50}}]}}
canary: {{rate: 20/s, timeout: 1500ms}}
scrape: {{interval: 1s, timeout: 800ms}}
advisor: {{window: 6s}}
exporter: {{web_config_file: {web_config}}}
alerting:
  alertmanager_url: http://127.0.0.1:{free_port()}
  evaluation_interval: 1s
  resend_interval: 2s
  webhook_url: "${{TW_TEST_WEBHOOK_URL}}"
  basic_auth: {{username: tritonwatch, password: "${{file:{password_file}}}"}}
"""
        )
        environment = {**os.environ, "TW_TEST_WEBHOOK_URL": f"{receiver.url}/{WEBHOOK_PATH}"}
        command = [TRITONWATCH, "run", "--config", str(config), "--listen", f"127.0.0.1:{port}",
                   "--log-format", "json", "--log-level", "debug"]  # fmt: skip
        with log_path.open("w") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                       env=environment)  # fmt: skip
        try:
            cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes().decode()
            receiver.wait_for("an alert at the secret webhook path", lambda _: True, timeout=40)
            url = f"http://127.0.0.1:{port}/metrics"
            good = requests.get(url, auth=("prom", SCRAPE_PASSWORD), timeout=5)
            bad = requests.get(url, auth=("prom", WRONG_PASSWORD), timeout=5)
            assert (good.status_code, bad.status_code) == (200, 401)
            process.send_signal(signal.SIGHUP)  # a reload logs the config once more
            wait_until(lambda: "config_reloaded" in log_path.read_text(), 10, "the reload")
            wait_until(lambda: "alert_delivery_failed" in log_path.read_text(), 10,
                       "a logged delivery failure")  # fmt: skip
            time.sleep(2)  # another resend round against the dead Alertmanager
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(10) == 0
            receiver.close()
    logs = log_path.read_text()
    for event in ("alert_delivery_failed", "config_reloaded", "http_request", "stopped"):
        assert f'"event": "{event}"' in logs  # the run really logged what it did, at debug
    basic_header = f"tritonwatch:{AM_PASSWORD}"
    for secret in (AM_PASSWORD, WEBHOOK_PATH, SCRAPE_PASSWORD, WRONG_PASSWORD, basic_header):
        for form in _forms(secret):
            assert form not in logs, f"{secret!r} appears in the logs as {form!r}"
            assert form not in cmdline
