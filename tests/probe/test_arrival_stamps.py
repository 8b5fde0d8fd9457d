"""Kernel arrival stamps: when an answer reached this host, not when we read it."""

from __future__ import annotations

import socket
import sys
import time

import pytest

from tritonwatch.probe.arrival_stamps import receive_stamped, stamp_arrivals


@pytest.fixture
def connected() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
    return client, peer


@pytest.mark.skipif(sys.platform != "linux", reason="SO_TIMESTAMPNS is Linux's")
def test_a_late_read_keeps_the_time_the_bytes_arrived(
    connected: tuple[socket.socket, socket.socket],
) -> None:
    """Breaks if the stamp is the read's time (a late reader would add its lateness), or
    if the wall-clock stamp is not turned into the monotonic clock the canary uses."""
    client, peer = connected
    with client, peer:
        assert stamp_arrivals(client)
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
        buffer = bytearray(8)
        deadline = time.monotonic() + 5
        while True:
            try:
                size, arrived = receive_stamped(client, buffer)
                break
            except BlockingIOError:  # pragma: no cover - a blocking socket does not raise
                assert time.monotonic() < deadline
    assert (size, arrived) == (1, None)
