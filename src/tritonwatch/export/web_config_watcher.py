"""The exporter's web-config in force, re-read when the file or a file it names changes.

The file's format and checks are in :mod:`tritonwatch.config.web_config`; this module
turns a checked file into what serving needs (the basic-auth checker, the TLS context)
and swaps it when the files change on disk.
"""

from __future__ import annotations

import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

from tritonwatch.common.file_stamps import FileStamps, file_stamps
from tritonwatch.common.logs import get_logger
from tritonwatch.config.errors import ConfigError, Problem
from tritonwatch.config.web_config import WebConfig, WebConfigError, load_web_config
from tritonwatch.export.basic_auth import BasicAuthChecker

_log = get_logger("exporter")


@dataclass(frozen=True, slots=True)
class ActiveWebConfig:
    """A loaded web-config with what serving needs from it, built once per load."""

    config: WebConfig
    checker: BasicAuthChecker | None
    tls_context: ssl.SSLContext | None
    stamps: FileStamps


def _activate(config: WebConfig) -> ActiveWebConfig:
    checker = BasicAuthChecker(config.users) if config.users else None
    context = config.tls.server_context() if config.tls is not None else None
    return ActiveWebConfig(config, checker, context, file_stamps(config.files()))


class WebConfigWatcher:
    """Holds the current web-config and re-reads it when it, or a certificate, key or CA
    file it names, changes on disk.

    exporter-toolkit re-reads the file on every request so rotated certificates and
    changed users apply at once; a ``stat`` per file per request gives the same
    effect without re-parsing. A changed file that does not validate is logged and the
    last good one stays in force, as for the main config on SIGHUP. Turning TLS on or
    off needs a restart: the exporter's URL scheme would change under its users.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._active = _activate(load_web_config(path))
        self._rejected: FileStamps | None = None
        self._lock = threading.Lock()

    def current(self) -> ActiveWebConfig:
        """The web-config in force, reloaded first if its files changed since last time."""
        active = self._active
        stamps = file_stamps(active.config.files())
        if stamps in (active.stamps, self._rejected):
            return active
        with self._lock:
            return self._reload(stamps)

    def _reload(self, stamps: FileStamps) -> ActiveWebConfig:
        active = self._active
        if stamps in (active.stamps, self._rejected):
            return active  # another request reloaded it meanwhile
        try:
            config = load_web_config(self.path)
            if (config.tls is None) != (active.config.tls is None):
                raise WebConfigError(
                    str(self.path),
                    [Problem("tls_server_config", "turning TLS on or off needs a restart")],
                )
            self._active = _activate(config)
        except (ConfigError, ssl.SSLError, OSError) as error:
            self._rejected = stamps
            _log.error("web_config_reload_failed", error=str(error))
            return active
        _log.info(
            "web_config_reloaded",
            path=str(self.path),
            users=len(config.users),
            tls=config.tls is not None,
        )
        return self._active
