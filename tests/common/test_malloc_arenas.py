"""The daemon caps glibc's malloc arenas before its threads start."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

from tritonwatch.common.libc import load_libc
from tritonwatch.common.malloc_arenas import limit_malloc_arenas

pytestmark = pytest.mark.real


@pytest.mark.skipif(sys.platform != "linux", reason="a glibc setting")
def test_glibc_takes_the_cap_and_threads_then_share_one_arena() -> None:
    """Breaks if limit_malloc_arenas stops calling mallopt(M_ARENA_MAX) (the engine's
    thread then grew the soak daemon's RSS by 5.6 MB in 45 s, against 1.2 MB capped).
    Checked in a fresh interpreter: malloc_info lists one <heap> per arena in use."""
    code = """
import ctypes, ctypes.util, threading
from tritonwatch.common.malloc_arenas import limit_malloc_arenas
assert limit_malloc_arenas()
def churn():
    for _ in range(2000):
        bytearray(4096)
threads = [threading.Thread(target=churn) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL(None)
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.open_memstream.restype = ctypes.c_void_p
buffer, size = ctypes.c_char_p(), ctypes.c_size_t()
stream = libc.open_memstream(ctypes.byref(buffer), ctypes.byref(size))
libc.malloc_info(0, stream)
libc.fclose(ctypes.c_void_p(stream))
print(buffer.value.decode().count("<heap nr="))
"""
    heaps = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60, check=True).stdout.strip()  # fmt: skip
    assert heaps == "1"
    assert limit_malloc_arenas() is True


def test_without_a_c_library_nothing_is_capped_and_nothing_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Breaks if a C library that cannot be loaded (libc.load_libc's None) raises out of
    the daemon's start instead of leaving glibc's default, or if the loader stops
    keeping one handle for every caller."""
    assert load_libc() is load_libc()  # one dlopen, shared with probe/canary/timer_slack.py

    def refused(name: object, use_errno: bool = False) -> object:
        raise OSError("no C library here")

    load_libc.cache_clear()
    monkeypatch.setattr(ctypes, "CDLL", refused)
    try:
        assert load_libc() is None
        assert limit_malloc_arenas() is False
    finally:
        monkeypatch.undo()
        load_libc.cache_clear()
    assert load_libc() is not None
