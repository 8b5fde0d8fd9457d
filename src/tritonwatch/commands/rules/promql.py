"""PromQL text the rule generators share: string literals and outcome matchers."""

from __future__ import annotations

from tritonwatch.records.observations import NOT_THE_SERVERS, Outcome


def quote(value: str) -> str:
    """A PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def not_outcomes(*outcomes: str) -> str:
    """The matcher that leaves ``outcomes`` out: ``outcome!="a"`` or ``outcome!~"a|b"``."""
    names = sorted({str(o) for o in outcomes})
    if len(names) == 1:
        return f"outcome!={quote(names[0])}"
    return f"outcome!~{quote('|'.join(names))}"


SERVER_FAILURES = not_outcomes(Outcome.SUCCESS, *NOT_THE_SERVERS)
"""The availability SLI's bad events: neither a success nor our own client's fault
(:data:`~tritonwatch.records.observations.NOT_THE_SERVERS`)."""
SERVER_OUTCOMES = not_outcomes(*NOT_THE_SERVERS)
"""The availability SLI's events: every outcome that speaks for the server."""
