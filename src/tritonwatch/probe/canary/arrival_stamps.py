"""When an answer's bytes reached this host, as the kernel stamped them.

A thread reading an answer learns of it when the OS wakes it, and on a busy or
virtualised host a wake-up now and then lands a whole scheduler tick late. The
time the *server* took ends when the last segment arrived, not when our thread got
round to reading it, so the canary's engine asks Linux to stamp every received segment
(``SO_TIMESTAMPNS``) and takes the stamp of the read that completed the answer. Where
the option or the stamp is missing (another OS, a socket that refused it), the reader's
own clock is used, as before.

Stamps are wall-clock (``CLOCK_REALTIME``); they are turned into the monotonic clock
the canary measures with by the offset between the two clocks read just after the
receive, so a step of the wall clock between a segment's arrival and its read (rare, and
microseconds apart) is the only error.
"""

from __future__ import annotations

import socket
import struct
import sys
import time

SO_TIMESTAMPNS = 35
"""Linux's ``SO_TIMESTAMPNS`` (``SO_TIMESTAMPNS_OLD``: a ``struct timespec`` of two
native longs); Python's ``socket`` module does not name it."""
_TIMESPEC = struct.Struct("@ll")
_ANCILLARY_BYTES = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0


def stamp_arrivals(sock: socket.socket) -> bool:
    """Asks the kernel to stamp what ``sock`` receives; False where it cannot."""
    if sys.platform != "linux":
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def receive_stamped(sock: socket.socket, buffer: bytearray) -> tuple[int, float | None]:
    """Reads into ``buffer``: (bytes read, when the newest of them arrived on the
    ``time.monotonic`` clock, or None without a stamp). Raises as ``recv_into`` does."""
    if not _ANCILLARY_BYTES:
        return sock.recv_into(buffer), None
    size, ancillary, _, _ = sock.recvmsg_into([buffer], _ANCILLARY_BYTES)
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)
            offset = time.time() - time.monotonic()
            return size, seconds + nanoseconds * 1e-9 - offset
    return size, None
