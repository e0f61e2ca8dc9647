"""What the benchmark scripts share: the results table they print and the JSON they write.

A script is run as ``.venv/bin/python bench/<name>.py``, so this module is importable as
``_common`` (the script's folder is first on ``sys.path``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Row = dict[str, Any]


@dataclass(frozen=True)
class Column:
    """One column of a results table.

    Attributes:
        title: the header, right-aligned over the values.
        width: the column's width.
        fmt: the format spec of a value (``".1f"``), after the alignment and width.
        value: the value of a row.
        on_failure: also shown on a failed variant's line (the columns that name the variant).
    """

    title: str
    width: int
    fmt: str
    value: Callable[[Row], Any]
    on_failure: bool = False

    def cell(self, row: Row) -> str:
        """The formatted value of ``row``."""
        return format(self.value(row), f">{self.width}{self.fmt}")


def print_table(
    rows: Sequence[Row],
    name: Column,
    columns: Sequence[Column],
    *,
    error_chars: int = 80,
) -> None:
    """Print a blank line, a header and a line per row; a row with an ``error`` says so.

    Args:
        rows: the results, one per variant.
        name: the first column (left-aligned): what the variant is.
        columns: the figures.
        error_chars: how much of a failed variant's error to show.
    """
    print()
    print(" ".join([f"{name.title:<{name.width}}", *(f"{c.title:>{c.width}}" for c in columns)]))
    for r in rows:
        first = format(name.value(r), f"<{name.width}{name.fmt}")
        if "error" in r:
            named = [c.cell(r) for c in columns if c.on_failure]
            print(" ".join([first, *named, f"failed: {r['error'][:error_chars]}"]))
            continue
        print(" ".join([first, *(c.cell(r) for c in columns)]))


def write_rows(path: Path | None, rows: Sequence[Row]) -> None:
    """Write the results as a JSON list to ``path`` (nothing when ``path`` is None)."""
    if path:
        path.write_text(json.dumps(rows, indent=2) + "\n")
