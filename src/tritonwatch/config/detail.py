"""The exporter's detail levels (``exporter.detail``); what each level exports is
:mod:`tritonwatch.export.detail`."""

from __future__ import annotations

from enum import StrEnum


class Detail(StrEnum):
    """An exporter detail level, ``minimal`` < ``standard`` < ``full``."""

    MINIMAL = "minimal"
    STANDARD = "standard"
    FULL = "full"

    @property
    def rank(self) -> int:
        """0, 1, 2 in the order above: a level exports what every lower one does."""
        return list(Detail).index(self)
