"""Response compression as Triton's HTTP frontend chooses it from ``Accept-Encoding``.

Triton compresses inference responses (only those; metadata, config and statistics go
out plain) when the client's ``Accept-Encoding`` allows it, and clients break on it when
they did not expect it. Triton's rule (``CompressionTypeUsed`` in ``http_server.cc``) is
simpler than HTTP's: the comma-separated entries are read in order, leading spaces
dropped, ``;q=`` parsed as a number (an entry whose weight does not parse is skipped);
of the entries naming exactly ``identity``, ``deflate`` or ``gzip`` the one with the
highest weight above 0 wins, the first one on a tie, and a missing weight counts as 1.
Anything else (``GZIP``, ``*``, ``br``, ``gzip `` with a trailing space) is ignored, and
nothing left means no compression. ``deflate`` is the zlib format (RFC 1950), as Triton
sends it.
"""

from __future__ import annotations

import gzip
import re
import zlib

_LEADING_NUMBER = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
SUPPORTED = ("gzip", "deflate")
_CANDIDATES = ("identity", *SUPPORTED)


def _weight(text: str) -> float | None:
    """``std::stod``: the number at the start of ``text`` (None when there is none)."""
    match = _LEADING_NUMBER.match(text)
    return float(match.group()) if match else None


def chosen_encoding(accept_encoding: str | None) -> str:
    """The encoding Triton picks for ``accept_encoding``: gzip, deflate or identity."""
    if not accept_encoding:
        return "identity"
    best, best_weight = "identity", 0.0
    for entry in accept_encoding.split(","):
        stripped = entry.lstrip(" ")
        if not stripped:
            continue
        name, separator, rest = stripped.partition(";q=")
        if separator and not name:
            continue
        weight = 1.0
        if separator:
            parsed = _weight(rest)
            if parsed is None:
                continue
            weight = parsed
        if name in _CANDIDATES and weight > best_weight:
            best, best_weight = name, weight
    return best


def compress(body: bytes, encoding: str) -> bytes:
    """``body`` in ``encoding`` (gzip or deflate)."""
    if encoding == "gzip":
        return gzip.compress(body, compresslevel=6, mtime=0)
    if encoding == "deflate":
        return zlib.compress(body, 6)
    raise ValueError(f"unsupported encoding: {encoding!r}")
