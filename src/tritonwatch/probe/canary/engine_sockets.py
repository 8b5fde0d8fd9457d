"""The engine's waits on its sockets, and the look it takes at an idle connection.

One place for every wait of the canary engine (:mod:`~tritonwatch.probe.canary.engine`),
so a process with descriptors past ``select()``'s limit waits with ``poll()`` in all of
them, and a test can run the engine on virtual time by standing in for
:func:`wait_ready` here.
"""

from __future__ import annotations

import select
import socket

from tritonwatch.probe.canary.engine_wires import Wire

FD_SETSIZE = 1024
"""select() cannot watch a descriptor at or above it; poll() takes over there."""


def revived(sock: socket.socket, wire: Wire, buffer: bytearray) -> bool:
    """Whether an idle keep-alive connection can carry the next request: the server has
    not closed it (EOF), and what it sent meanwhile, if anything, its wire accepts
    (HTTP/1.1: nothing; HTTP/2: control frames). Asked when it is taken, not by
    watching every idle connection in each ``select()``: the kernel's cost of a select
    grows with the descriptors it watches, and most of them are idle. A ``select()``
    first: the usual answer, nothing to read, is then no ``BlockingIOError`` raised and
    caught, which costs more CPU than the ``select()`` with the cold caches of an engine
    that runs at one request a second."""
    fits = sock.fileno() < FD_SETSIZE
    while wait_ready([sock], [], 0.0, fits)[0]:  # bytes, the server's EOF or an error
        try:
            size = sock.recv_into(buffer)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not size or not wire.idle_data(bytes(buffer[:size])):
            return False  # closed, or bytes it cannot take
    return True  # nothing (more) to read: open and quiet


def sent_whole(sock: socket.socket, data: bytes) -> bool:
    """Writes the bytes a finished exchange still owes (a few control frames, which an
    idle connection's send buffer always takes); False when it did not take them all."""
    if not data:
        return True
    try:
        return sock.send(data) == len(data)
    except OSError:
        return False


def wait_ready(
    readers: list[socket.socket],
    writers: list[socket.socket],
    timeout: float,
    fits: bool | None = None,
) -> tuple[list[socket.socket], list[socket.socket]]:
    """``select()`` (microsecond timeouts) while every descriptor fits its fd_set
    (``fits``, when the caller knows; else each is looked at); ``poll()`` (whole
    milliseconds, rounded up) in a process with 1024 or more open."""
    if fits is None:
        fits = all(sock.fileno() < FD_SETSIZE for sock in (*readers, *writers))
    if fits:
        readable, writable, _ = select.select(readers, writers, [], timeout)
        return readable, writable
    poller = select.poll()
    by_fd = {sock.fileno(): sock for sock in (*readers, *writers)}
    for sock in readers:
        poller.register(sock, select.POLLIN)
    for sock in writers:
        poller.register(sock, select.POLLOUT)
    ready = poller.poll(timeout * 1e3)
    readable = [
        by_fd[fd]
        for fd, event in ready
        if event & ~select.POLLOUT and fd in by_fd and by_fd[fd] in readers
    ]
    writable = [
        by_fd[fd]
        for fd, event in ready
        if event & ~select.POLLIN and fd in by_fd and by_fd[fd] in writers
    ]
    return readable, writable
