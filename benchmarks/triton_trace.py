"""A third reference for client latency: Triton's own trace of each request.

perf_analyzer and the canary disagree by a few tenths of a millisecond over gRPC, and
either could be the one that is off. The server can say which: with
``--trace-config level=TIMESTAMPS`` tritonserver records, per request, when its gRPC
front end had read the request (``GRPC_WAITREAD_END``) and when it had written the
answer (``GRPC_SEND_END``), on ``std::chrono::steady_clock``, which on Linux is
``CLOCK_MONOTONIC``: the clock of :func:`time.monotonic_ns` in this process. The span
between the two is the time the request spent in the server; what a client reads
beyond it is the client's share (loopback transit, TLS, its own threads). A client
whose p95 reads *below* the server's residence p95 would be under-reporting; one far
above it carries overhead of its own.

Tracing every request costs the server a few microseconds each, for both tools alike.
The trace is written when the server stops (``log-frequency`` 0), so a benchmark notes
each tool's time window and reads the residences afterwards.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

READ = {"GRPC_WAITREAD_END", "HTTP_RECV_END"}
SENT = {"GRPC_SEND_END", "HTTP_SEND_END"}
"""The server's first and last stamps of one request, per front end."""


def trace_flags(path: Path) -> list[str]:
    """tritonserver's flags to trace every request's timestamps into ``path``."""
    return [
        f"--trace-config=triton,file={path}",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=1",
        "--trace-config=count=-1",
    ]


@dataclass(frozen=True)
class Residence:
    """One traced request: when the server had read it and written its answer (ns)."""

    read_ns: int
    sent_ns: int

    @property
    def seconds(self) -> float:
        return (self.sent_ns - self.read_ns) * 1e-9


def read_trace(path: Path) -> list[Residence]:
    """Every complete request in the trace file(s) at ``path`` (Triton splits a trace
    into ``path.0``, ``path.1``… when it writes it in parts), in order of reading."""
    stamps: dict[int, dict[str, int]] = defaultdict(dict)
    for file in sorted({path, *path.parent.glob(path.name + ".*")}):
        if file.exists():
            for record in json.loads(file.read_text() or "[]"):
                for stamp in record.get("timestamps", ()):
                    stamps[record["id"]][stamp["name"]] = int(stamp["ns"])
    found = []
    for names in stamps.values():
        read = [names[n] for n in READ if n in names]
        sent = [names[n] for n in SENT if n in names]
        if read and sent:
            found.append(Residence(read[0], sent[0]))
    return sorted(found, key=lambda r: r.read_ns)


def residences_between(trace: Iterable[Residence], start_ns: int, end_ns: int) -> list[float]:
    """The residences (s) of the requests the server read within [start_ns, end_ns]."""
    return [r.seconds for r in trace if start_ns <= r.read_ns <= end_ns]
