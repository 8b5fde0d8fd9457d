"""The config in force, its generation, and how the last reload went.

Who owns what: :class:`ConfigOwner` holds the one config the daemon runs. Only the
daemon's lifecycle writes it (a reload, under the lifecycle lock, on the main thread);
every other thread reads a :class:`ConfigSnapshot` and never applies a config it read:
it reports what it found, and the lifecycle applies the config in force then.

The generation counts the configs put in force. Work that reads a snapshot, does I/O
without any lock (a repository index, discovery files) and then wants its result
applied says which generation it read under; a reload in between moved the
generation on, and the result is dropped instead of undoing the reload.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from tritonwatch.config.schema import Config


@dataclass(frozen=True, slots=True)
class ConfigSnapshot:
    """The config in force when read, and its generation."""

    config: Config
    generation: int


@dataclass(frozen=True, slots=True)
class ReloadStatus:
    """``tritonwatch_config_last_reload_successful`` and its success timestamp."""

    succeeded: bool
    last_success: float
    """Unix seconds of the last successful (re)load."""


class ConfigOwner:
    """The config in force. Thread-safe; written by the daemon's lifecycle only."""

    def __init__(self, config: Config, wall_clock: Callable[[], float]) -> None:
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._snapshot = ConfigSnapshot(config, 0)
        self._status = ReloadStatus(True, wall_clock())

    @property
    def config(self) -> Config:
        with self._lock:
            return self._snapshot.config

    def snapshot(self) -> ConfigSnapshot:
        with self._lock:
            return self._snapshot

    def is_current(self, generation: int) -> bool:
        """Whether ``generation`` is still the one in force (no reload since)."""
        with self._lock:
            return self._snapshot.generation == generation

    def put(self, config: Config) -> ConfigSnapshot:
        """Puts ``config`` in force as a new generation: results read under an earlier
        one are stale from now on. The same config again (a re-apply) is a new one too."""
        with self._lock:
            self._snapshot = ConfigSnapshot(config, self._snapshot.generation + 1)
            return self._snapshot

    def reloaded(self, succeeded: bool) -> None:
        """Records a reload's outcome (a success stamps the time)."""
        with self._lock:
            last = self._wall_clock() if succeeded else self._status.last_success
            self._status = ReloadStatus(succeeded, last)

    def reload_status(self) -> ReloadStatus:
        with self._lock:
            return self._status
