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


@pytest.mark.skipif(sys.platform != "linux", reason="a glibc setting")
def test_the_mmap_threshold_stays_pinned_after_a_large_block_is_freed() -> None:
    """Breaks if limit_malloc_arenas stops pinning M_MMAP_THRESHOLD: glibc then raises the
    threshold when a large block is freed, and the next large blocks (a thousand models'
    /metrics, every scrape) come from the heap and keep their pages there. Checked in a
    fresh interpreter through mallinfo2's hblks (blocks mapped now) around a 4 MB block
    allocated after another was freed."""
    code = """
import ctypes, sys
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "pinned":
    from tritonwatch.common.malloc_arenas import limit_malloc_arenas
    assert limit_malloc_arenas()
first = libc.malloc(4 << 20)
libc.free(first)  # glibc's dynamic threshold would now rise past 4 MB
before = libc.mallinfo2().hblks
second = libc.malloc(4 << 20)
print(libc.mallinfo2().hblks - before)
libc.free(second)
"""

    def mapped(mode: str) -> str:
        run = subprocess.run(
            [sys.executable, "-c", code, mode], capture_output=True, text=True, timeout=60
        )
        assert run.returncode == 0, run.stderr
        return run.stdout.strip()

    assert mapped("default") == "0"  # glibc's own behaviour: the heap serves it
    assert mapped("pinned") == "1"
