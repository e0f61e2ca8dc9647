"""``arfl chaos``: see the README; built in its own issue."""

from __future__ import annotations

from arfl.cli.main import app
from arfl.errors import ArflError


@app.command(hidden=False)
def chaos() -> None:
    """Not available yet in this version."""
    raise ArflError("'arfl chaos' is not available yet in this version")
