"""Plain-text tables for the terminal: columns padded to their widest cell, the last one left as is."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence


def format_table(rows: Sequence[Sequence[str]]) -> str:
    if not rows:
        return ""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1]
             for row in rows]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def printable(text: str) -> str:
    """Text someone else wrote, safe to show: control characters (a terminal's escape sequences among them)
    become `?`."""
    return "".join("?" if unicodedata.category(char).startswith("C") else char for char in text)
