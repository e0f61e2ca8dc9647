"""Shared rich consoles for the CLI layer."""

from __future__ import annotations

from rich.console import Console

out = Console()
err = Console(stderr=True)
