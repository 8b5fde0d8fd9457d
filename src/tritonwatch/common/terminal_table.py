"""Plain-text tables that fit the terminal without cutting a number.

``sweep``, ``tune``, ``rules`` and the demo's live view print through this one layout,
so that they behave alike at 80 columns and use the room of a wide terminal: cells are
never truncated or ellipsised (a number cut to "280…" is worse than no number); a long
text column (notes, reasons) moves onto an indented line under its row when the row
would not fit, and optional columns are shown only while there is room, most important
first. Units live in
the headers ("p95 ms", "infer/s") so the cells hold bare numbers. No rich here: ``rules``
prints through it too and stays free of rich's import cost.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

GAP = "  "
"""Between two columns."""
NOTE_INDENT = "    "
"""Before a text column moved under its row."""
MIN_WIDTH = 20
"""Narrower than this, the terminal size is taken for a mistake and this is used."""


@dataclass(frozen=True)
class Column:
    """One column of a table.

    ``priority`` 0 is always shown; the others are added by increasing number while
    they fit (so a narrow terminal loses the highest numbers first). A ``note`` column
    holds text (reasons, notes, errors): in the row when there is room, else on its
    own indented line below it.
    """

    header: str
    priority: int = 0
    align: Literal["left", "right"] = "right"
    note: bool = False


def terminal_width() -> int:
    """The width to lay out for: ``COLUMNS`` when set, else the terminal's, else 80."""
    return max(MIN_WIDTH, shutil.get_terminal_size((80, 24)).columns)


def render_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    width: int | None = None,
    title: str | None = None,
) -> list[str]:
    """The table as lines no longer than ``width`` (default :func:`terminal_width`).

    Every cell is printed whole. The columns of priority 0 are laid out, then the
    optional columns that fit are added by priority, then the note columns that still
    fit (all of them, when the terminal is wide enough); the other notes go under their
    row. When even
    the columns of priority 0 do not fit side by side, each row is printed as
    ``header: value`` lines instead.
    """
    width = terminal_width() if width is None else width
    widths = [_column_width(column, rows, i) for i, column in enumerate(columns)]

    def fits(shown: list[int]) -> bool:
        return sum(widths[i] for i in shown) + len(GAP) * (len(shown) - 1) <= width

    everything = list(range(len(columns)))
    noted = [i for i in everything if columns[i].note]
    shown = [i for i in everything if columns[i].priority == 0 and i not in noted]
    if not fits(shown):
        return _title(title, width) + _records(columns, rows, width)
    optional = [i for i in everything if i not in shown]  # notes last: they can go below
    for candidate in sorted(optional, key=lambda i: (columns[i].note, columns[i].priority)):
        if fits(sorted([*shown, candidate])):
            shown = sorted([*shown, candidate])
    below = [i for i in noted if i not in shown]
    return _title(title, width) + _rows(
        columns, rows, widths, shown=shown, noted=below, width=width
    )


def _column_width(column: Column, rows: Sequence[Sequence[str]], index: int) -> int:
    return max([len(column.header), *(len(row[index]) for row in rows)])


def _cell(text: str, width: int, align: Literal["left", "right"]) -> str:
    return text.rjust(width) if align == "right" else text.ljust(width)


def _line(
    cells: Sequence[str], widths: list[int], shown: list[int], columns: Sequence[Column]
) -> str:
    return GAP.join(_cell(cells[i], widths[i], columns[i].align) for i in shown).rstrip()


def _rows(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    widths: list[int],
    *,
    shown: list[int],
    noted: list[int],
    width: int,
) -> list[str]:
    lines = [_line([c.header for c in columns], widths, shown, columns)]
    for row in rows:
        lines.append(_line(row, widths, shown, columns))
        for i in noted:
            if row[i] and row[i] not in ("-", "–"):
                lines += _wrapped(f"{columns[i].header}: {row[i]}", width, NOTE_INDENT)
    return lines


def _records(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> list[str]:
    """The fallback for a very narrow terminal: one ``header: value`` line per cell."""
    lines: list[str] = []
    for row in rows:
        for index, column in enumerate(columns):
            indent = "" if index == 0 else "  "
            lines += _wrapped(f"{column.header}: {row[index]}", width, indent)
    return lines


def _title(title: str | None, width: int) -> list[str]:
    return [] if title is None else _wrapped(title, width, "")


def _wrapped(text: str, width: int, indent: str) -> list[str]:
    """``text`` over lines of at most ``width``, broken between words (a word longer
    than a whole line is split: the only way to keep to the width)."""
    return textwrap.wrap(
        text,
        width=width,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_on_hyphens=False,
    ) or [indent.rstrip()]
