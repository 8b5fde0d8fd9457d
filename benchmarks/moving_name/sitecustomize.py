"""A host name that can move, for the moved-name benchmark (benchmarks/moved_name.py).

Imported at the start of the daemon's interpreter only when this folder is on its
``PYTHONPATH`` (the benchmark puts it there), and active only when
``TRITONWATCH_MOVING_NAMES`` names a JSON file ``{"host": {"port": real_port}}``: a
lookup of such a host answers 127.0.0.1 and the real port the file gives now, read at
every lookup, as a DNS record or a Kubernetes Service moving to another pod would. It
replaces ``socket.getaddrinfo``, which every client in the daemon resolves through
(``requests``/urllib3 for scrapes and readiness, the canary engine through the event
loop's resolver), so the daemon's own code is what is tested. Real servers stay on
127.0.0.1; every other name resolves as usual.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

_NAMES = os.environ.get("TRITONWATCH_MOVING_NAMES")


def _install(path: str) -> None:
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        try:
            with Path(path).open() as file:
                table = json.load(file)
        except (OSError, ValueError):
            table = {}
        ports = table.get(name)
        if ports is None:
            return real(host, port, *args, **kwargs)
        return real("127.0.0.1", ports.get(str(port), port), *args, **kwargs)

    socket.getaddrinfo = getaddrinfo


if _NAMES:
    _install(_NAMES)
