"""The generated rules that are not an SLO: the group ``tritonwatch-health``.

One rule per alert for every target and model (they read the daemon's series, not the
config), so models discovered at run time are covered too:

* ``TritonServerDown`` (page): ``tritonwatch_up`` is 0 for a minute. The daemon raises
  the same alert in process from its readiness board; with ``for: 1m`` a 12-second
  restart raises nothing. The shipped Alertmanager config lets it inhibit the
  server's models' ``TritonSLOBurn`` and ``TritonModelNotServing``: a down server
  pages once, as the server.
* ``TritonModelNotServing`` (page): the server is ready, and over the window the
  model's canary had failures and no success (``client_error``, our own fault, counts
  neither way), held ``for:`` ``alerting.not_serving_for`` (default 1m). The window is
  that hold, but never under :data:`MIN_NOT_SERVING_WINDOW` (``increase()`` needs a
  few of Prometheus's scrapes in it). The daemon raises it once the run of failures is
  ``not_serving_for`` old, Prometheus about a window later (its window must first hold
  only failures, then ``for:``): the same labels, so Alertmanager keeps one alert,
  started by the first path to see it.
* ``TritonwatchCanaryStalled`` (ticket): ``tritonwatch_canary_stalled`` is 1 (a canary
  produced no outcome for three intervals and its timeout), held for a minute.
* ``TritonwatchDown`` (page): a daemon's scrape has failed for five minutes
  (``up{job="<alerting.exporter_job>"} == 0``, one alert per ``instance``): one dead
  daemon among several (a DaemonSet, a sharded fleet) whose peers still export, which
  ``TritonwatchAbsent`` cannot see.
* ``TritonwatchAbsent`` (page): ``tritonwatch_build_info`` has been absent for five
  minutes: every daemon is gone or none is scraped, and nothing they watch can alert.

Series are aggregated ``by`` the alert's labels, so the alert carries no ``instance``
or ``job`` and matches the daemon's own alert label for label (``TritonwatchDown``
alone keeps them: the instance is what it names, and no daemon raises it itself).
"""

from __future__ import annotations

from typing import Any

from tritonwatch.analysis.serving import HOLD_SECONDS
from tritonwatch.commands.rules.promql import SERVER_FAILURES, quote
from tritonwatch.config.units import format_duration
from tritonwatch.export.alerts import (
    CANARY_STALLED,
    DEFAULT_RUNBOOK_BASE,
    EXPORTER_ABSENT,
    EXPORTER_DOWN,
    MODEL_NOT_SERVING,
    SERVER_DOWN,
)
from tritonwatch.records.observations import Outcome

HEALTH_GROUP = "tritonwatch-health"
UP = "tritonwatch_up"
STALLED = "tritonwatch_canary_stalled"
BUILD_INFO = "tritonwatch_build_info"
REQUESTS = "tritonwatch_canary_requests_total"
MIN_NOT_SERVING_WINDOW = 60.0
"""The shortest window over which the not-serving rule looks for only failures (seconds):
the daemon's hold when longer, else this, so the window holds a few scrapes."""


def prometheus_duration(seconds: float) -> str:
    """``seconds`` as a Prometheus duration (``1m``, ``90s``, ``1500ms``): whole
    milliseconds, at least one."""
    return format_duration(max(round(seconds * 1000), 1) / 1000)


def _increase(matcher: str, window: str) -> str:
    return f"sum by (target, model) (increase({REQUESTS}{{{matcher}}}[{window}]))"


def _last(window: str) -> str:
    """``last minute``, ``last 5m``: the window in the rule's description."""
    return "last minute" if window == "1m" else f"last {window}"


def _runbook(base: str, alert: str) -> str:
    return f"{base}#{alert.lower()}"


def alert_rule(
    alert: str,
    *,
    expr: str,
    held_for: str,
    severity: str,
    summary: str,
    description: str,
    runbook_base: str,
) -> dict[str, Any]:
    """One generated alerting rule, written the way every one here is: its runbook link
    is ``runbook_base#<alert in lower case>``."""
    return {
        "alert": alert,
        "expr": expr,
        "for": held_for,
        "labels": {"severity": severity},
        "annotations": {
            "summary": summary,
            "description": description,
            "runbook_url": _runbook(runbook_base, alert),
        },
    }


def server_down_rule(runbook_base: str = DEFAULT_RUNBOOK_BASE) -> dict[str, Any]:
    return alert_rule(
        SERVER_DOWN,
        expr=f"max by (target) ({UP}) == 0",
        held_for="1m",
        severity="page",
        summary="Triton server {{ $labels.target }} is down",
        description="{{ $labels.target }} has failed its readiness check "
        f"({UP} == 0) for over a minute; its models' SLO burn and not-serving "
        "alerts are inhibited while this one fires.",
        runbook_base=runbook_base,
    )


def model_not_serving_rule(
    runbook_base: str = DEFAULT_RUNBOOK_BASE, not_serving_for: float = HOLD_SECONDS
) -> dict[str, Any]:
    """Held ``for:`` ``not_serving_for`` (``alerting.not_serving_for``), as the daemon
    holds its own verdict, over a window of that but at least
    :data:`MIN_NOT_SERVING_WINDOW`."""
    window = prometheus_duration(max(not_serving_for, MIN_NOT_SERVING_WINDOW))
    failed = _increase(SERVER_FAILURES, window)
    succeeded = _increase(f'outcome="{Outcome.SUCCESS}"', window)
    return alert_rule(
        MODEL_NOT_SERVING,
        expr=f"{failed} > 0\nunless on (target, model)\n{succeeded} > 0\n"
        f"and on (target)\nmax by (target) ({UP}) == 1",
        held_for=prometheus_duration(not_serving_for),
        severity="page",
        summary="{{ $labels.model }} on {{ $labels.target }} is not serving: "
        "the server is ready, every canary request fails",
        description='{{ $value | printf "%.0f" }} canary requests failed over the '
        f"{_last(window)} and none succeeded, while the server answers its readiness "
        "check. The daemon's own alert carries the last error.",
        runbook_base=runbook_base,
    )


def canary_stalled_rule(runbook_base: str = DEFAULT_RUNBOOK_BASE) -> dict[str, Any]:
    return alert_rule(
        CANARY_STALLED,
        expr=f"max by (target, model, protocol) ({STALLED}) == 1",
        held_for="1m",
        severity="ticket",
        summary="the canary of {{ $labels.model }} on {{ $labels.target }} produces nothing",
        description="No outcome for three canary intervals and its timeout: the "
        "model is not being watched, so its SLOs cannot burn.",
        runbook_base=runbook_base,
    )


def exporter_down_rule(
    job: str = "tritonwatch", runbook_base: str = DEFAULT_RUNBOOK_BASE
) -> dict[str, Any]:
    """``TritonwatchDown`` for every instance of ``job`` (``alerting.exporter_job``)."""
    return alert_rule(
        EXPORTER_DOWN,
        expr=f"up{{job={quote(job)}}} == 0",
        held_for="5m",
        severity="page",
        summary="tritonwatch {{ $labels.instance }} is down",
        description="Prometheus has failed to scrape {{ $labels.instance }} (job "
        "{{ $labels.job }}) for five minutes: the targets and models it watches cannot "
        "alert while the other daemons run on.",
        runbook_base=runbook_base,
    )


def absent_rule(runbook_base: str = DEFAULT_RUNBOOK_BASE) -> dict[str, Any]:
    return alert_rule(
        EXPORTER_ABSENT,
        expr=f"absent({BUILD_INFO})",
        held_for="5m",
        severity="page",
        summary="tritonwatch exports nothing",
        description=f"{BUILD_INFO} has been absent for five minutes: the daemon "
        "is down or not scraped, and no model it watches can alert.",
        runbook_base=runbook_base,
    )


def health_group(
    runbook_base: str = DEFAULT_RUNBOOK_BASE,
    not_serving_for: float = HOLD_SECONDS,
    exporter_job: str = "tritonwatch",
) -> dict[str, Any]:
    """The group of alerts that are not an SLO (the same for every config but the
    not-serving hold, ``alerting.not_serving_for``, and the daemons' scrape job,
    ``alerting.exporter_job``)."""
    rules = [
        server_down_rule(runbook_base),
        model_not_serving_rule(runbook_base, not_serving_for),
        canary_stalled_rule(runbook_base),
        exporter_down_rule(exporter_job, runbook_base),
        absent_rule(runbook_base),
    ]
    return {"name": HEALTH_GROUP, "rules": rules}
