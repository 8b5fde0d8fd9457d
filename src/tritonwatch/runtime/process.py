"""The daemon's process: signals, the main thread's command loop, and a bounded exit.

``tritonwatch run`` parses its arguments and builds the daemon (:mod:`~tritonwatch.
commands.cli`); from then on the process is this module's. SIGTERM and SIGINT stop the
daemon, SIGHUP reloads its config, and whatever else asks for a stop or a reload (the
exporter's ``POST /-/reload``) goes through the same queue, so the main thread does
every start, reload and stop itself, and a reload that raises is a failed reload, never
the end of the main thread (a main thread gone would leave the daemon running without
anyone to stop it). Once the daemon runs, what start-up made is moved
out of the garbage collector's sight; at a stop the process ends within
:data:`SHUTDOWN_BUDGET_SECONDS` even if a probe still holds a worker thread.
"""

from __future__ import annotations

import gc
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Literal, Protocol

from tritonwatch.common.logs import get_logger
from tritonwatch.common.malloc_arenas import limit_malloc_arenas

EXIT_OK = 0
EXIT_START_FAILED = 1
SHUTDOWN_BUDGET_SECONDS = 4.0
"""SIGTERM must end the process within 5 s; this leaves a second of margin."""
RELOAD_WAIT_SECONDS = 30.0
"""How long a ``POST /-/reload`` waits for the main thread to reload (it reads one file)."""
COMMAND_POLL_SECONDS = 0.5
"""How often the main thread wakes to run signal handlers that arrived on other threads."""

Command = Literal["stop", "reload"]


class Runnable(Protocol):
    """What the process runs: the daemon's lifecycle."""

    def start(self) -> None: ...
    def reload(self) -> object: ...
    def stop(self) -> None: ...


class _Ticket:
    """A reload asked for by another thread, and its outcome once the main thread ran it."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self.succeeded = False

    def finish(self, succeeded: bool) -> None:
        self.succeeded = succeeded
        self._done.set()

    def wait(self, timeout: float) -> bool:
        return self._done.wait(timeout) and self.succeeded


class ProcessControl:
    """The commands for the main thread, from signals or from the daemon's own threads.

    ``SimpleQueue.put`` is reentrant, so signal handlers may call it: they only enqueue,
    and :meth:`serve` does the work on the main thread.
    """

    def __init__(self) -> None:
        self._commands: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self._tickets: queue.SimpleQueue[_Ticket] = queue.SimpleQueue()

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT stop, SIGHUP reloads (from the main thread only)."""
        signal.signal(signal.SIGTERM, lambda *_: self.request("stop"))
        signal.signal(signal.SIGINT, lambda *_: self.request("stop"))
        signal.signal(signal.SIGHUP, lambda *_: self.request("reload"))

    def request(self, command: Command) -> None:
        """Asks the main thread to ``command``; safe from any thread and from a handler."""
        self._commands.put(command)

    def reload_and_wait(self, timeout: float = RELOAD_WAIT_SECONDS) -> bool:
        """Asks for a reload, as SIGHUP does, and waits for it: True when the new config
        is in force (``POST /-/reload``'s 200), False when the old one stays or the main
        thread did not get to it in ``timeout``."""
        ticket = _Ticket()
        self._tickets.put(ticket)
        self.request("reload")
        return ticket.wait(timeout)

    def next_command(self) -> Command:
        """The next command, waiting in short slices: the kernel may deliver SIGTERM to
        any thread, and Python runs the handler only when the main thread wakes. An
        untimed ``get`` would sleep through a signal that landed on a worker thread."""
        while True:
            try:
                return self._commands.get(timeout=COMMAND_POLL_SECONDS)
            except queue.Empty:
                continue

    def serve(self, make_daemon: Callable[[], Runnable]) -> int:
        """Builds and starts the daemon, runs its reloads until a stop, then stops it and
        ends within the budget. Returns the exit status (1 when it could not start)."""
        limit_malloc_arenas()  # before the daemon's threads start (malloc_arenas.py: why)
        daemon = make_daemon()
        try:
            daemon.start()
        except OSError as error:
            get_logger("process").error("start_failed", error=str(error))
            daemon.stop()
            return EXIT_START_FAILED
        freeze_start_up_objects()
        while (command := self.next_command()) != "stop":
            if command == "reload":
                waiting = self._waiting_tickets()
                succeeded = _reload(daemon)
                for ticket in waiting:
                    ticket.finish(succeeded)
        deadline = time.monotonic() + SHUTDOWN_BUDGET_SECONDS
        daemon.stop()
        exit_within(deadline)
        return EXIT_OK

    def _waiting_tickets(self) -> list[_Ticket]:
        """The reload requests made before the reload about to run: it reads the config
        after all of them, so its outcome is theirs."""
        tickets = []
        while True:
            try:
                tickets.append(self._tickets.get_nowait())
            except queue.Empty:
                return tickets


def _reload(daemon: Runnable) -> bool:
    """The main thread's exception boundary around a reload: whatever a reload raises
    (the daemon keeps its running config on a failed apply and says so itself; this is
    for what it did not foresee) is a failed reload, logged, and the main thread lives
    on to serve the next command and, at the end, to stop the daemon."""
    try:
        return bool(daemon.reload())
    except Exception as error:
        get_logger("process").exception("reload_raised", error=str(error))
        return False


def freeze_start_up_objects() -> None:
    """Moves what start-up made (modules, classes, the config: objects that live as long
    as the process) out of the garbage collector's sight, so its periodic full passes
    only walk what the daemon allocates while running."""
    gc.collect()
    gc.freeze()


def exit_within(deadline: float) -> None:
    """Waits for worker threads until ``deadline``, then exits regardless.

    A probe stuck on a hanging server holds a worker thread until its own timeout;
    the interpreter would join it at exit. The exit is bounded instead.
    """
    for thread in threading.enumerate():
        if thread is threading.main_thread() or thread.daemon:
            continue
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    stragglers = [t.name for t in threading.enumerate() if t.is_alive() and not t.daemon]
    if len(stragglers) > 1:  # the main thread is always there
        get_logger("process").warning("exit_abandons_threads", threads=stragglers[1:])
        sys.stdout.flush()
        os._exit(EXIT_OK)
