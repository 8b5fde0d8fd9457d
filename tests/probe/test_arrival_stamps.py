"""Kernel arrival stamps: when an answer reached this host, not when we read it."""

from __future__ import annotations

import socket
import sys
import time

import pytest

from tritonwatch.probe.canary.arrival_stamps import receive_stamped, stamp_arrivals


@pytest.fixture
def connected() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
    return client, peer


def _until_stamped(client: socket.socket, peer: socket.socket) -> None:
    """Waits until the kernel stamps what ``client`` receives: it turns stamping on a
    moment after the first socket asks (a deferred work item), later on a busy host."""
    buffer = bytearray(8)
    for _ in range(500):
        peer.sendall(b"w")
        if receive_stamped(client, buffer)[1] is not None:
            return
        time.sleep(0.01)
    raise AssertionError("the kernel never stamped an arrival in 5 s")


@pytest.mark.skipif(sys.platform != "linux", reason="SO_TIMESTAMPNS is Linux's")
def test_a_late_read_keeps_the_time_the_bytes_arrived(
    connected: tuple[socket.socket, socket.socket],
) -> None:
    """Breaks if the stamp is the read's time (a late reader would add its lateness), or
    if the wall-clock stamp is not turned into the monotonic clock the canary uses."""
    client, peer = connected
    with client, peer:
        assert stamp_arrivals(client)
        _until_stamped(client, peer)
        before = time.monotonic()
        peer.sendall(b"answer")
        time.sleep(0.2)  # the reader is late: the OS woke it a while after the bytes came
        buffer = bytearray(64)
        size, arrived = receive_stamped(client, buffer)
        read_at = time.monotonic()
    assert bytes(buffer[:size]) == b"answer"
    assert arrived is not None
    assert before - 0.002 <= arrived  # not before it was sent (2 ms for the two clocks)
    assert read_at - arrived >= 0.2 - 0.002  # the late read's wait is not in the stamp


def test_without_the_option_the_reader_uses_its_own_clock(
    connected: tuple[socket.socket, socket.socket],
) -> None:
    """Breaks if a socket that was never asked to stamp yields a made-up arrival time."""
    client, peer = connected
    with client, peer:
        peer.sendall(b"x")
        client.settimeout(5)  # blocking: the read waits for the byte
        buffer = bytearray(8)
        size, arrived = receive_stamped(client, buffer)
    assert (size, arrived) == (1, None)
