"""One malloc arena for the whole daemon, set before its threads start.

glibc gives every thread that allocates its own malloc arena (up to 8 per core) and
rarely hands an arena's freed pages back. The daemon's threads are few and mostly
asleep, so extra arenas buy nothing but RSS: with the plain-HTTP canary engine's thread
allocating each answer, the 45 s soak (20 models at 2/s) grew the daemon by +5.6 MB
against +1.1 MB without that thread, and by +1.2 MB with ``MALLOC_ARENA_MAX=1``. This
is the same setting, made from inside the process (``mallopt(M_ARENA_MAX, 1)``), so it
needs no environment variable in every deployment. Elsewhere (musl, macOS) nothing
changes.

The mmap threshold is pinned too (``mallopt(M_MMAP_THRESHOLD, 128 KiB)``, glibc's
starting value): glibc raises it after each large block is freed, up to 32 MiB, and from
then on serves large blocks from the heap, where their pages stay after they are freed. A
scrape of a thousand models' ``/metrics`` (3.4 MB of text) or statistics answer is such a
block, every 15 s. Pinned, they are mapped and unmapped each time: at 1 000 models the
daemon's RSS was 144.5 MiB instead of 153 MiB (200 models: 74.2 instead of 75.7), which
is what brings its growth per model under 0.1 MiB (benchmarks, section scale).
"""

from __future__ import annotations

import sys

from tritonwatch.common.libc import load_libc

M_ARENA_MAX = -8
M_MMAP_THRESHOLD = -3
"""From glibc's <malloc.h>."""
MMAP_THRESHOLD_BYTES = 128 * 1024
"""glibc's default starting threshold, pinned so that it no longer grows."""


def limit_malloc_arenas(arenas: int = 1) -> bool:
    """Caps glibc's malloc arenas and pins its mmap threshold; True when glibc took both.
    Call before starting threads."""
    libc = load_libc() if sys.platform == "linux" else None
    mallopt = getattr(libc, "mallopt", None)  # glibc's; musl has none
    if mallopt is None:
        return False
    capped = int(mallopt(M_ARENA_MAX, arenas)) == 1
    pinned = int(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) == 1
    return capped and pinned
