"""Has a file changed since we last read it? Cheap stat-based stamps, compared whole.

Both the file_sd discovery files and the exporter's web-config (and the certificates it
names) are re-read only when their stamps change, so an unchanged file costs one
``stat`` per check, not a parse.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

FileStamp = tuple[str, int, int, int] | None
"""(path, inode, mtime in ns, size), or None for a file that could not be read."""
FileStamps = tuple[FileStamp, ...]


def file_stamps(paths: Iterable[Path]) -> FileStamps:
    """One stamp per path, in order: an edit, a rewrite by rename (a new inode), a
    rotation, a file added or removed all change the result."""
    stamps: list[FileStamp] = []
    for path in paths:
        try:
            stat = os.stat(path)  # noqa: PTH116 - the one stat call serves three fields
        except OSError:
            stamps.append(None)
        else:
            stamps.append((str(path), stat.st_ino, stat.st_mtime_ns, stat.st_size))
    return tuple(stamps)
