"""Where arfl keeps downloads (cache) and the embedded stack's state."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Directory for downloaded jars; ``ARFL_CACHE_DIR`` overrides ``~/.cache/arfl``."""
    env = os.environ.get("ARFL_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "arfl"


def state_dir() -> Path:
    """Directory for the embedded stack's data, logs and pid files.

    ``ARFL_STATE_DIR`` overrides ``~/.local/state/arfl``.
    """
    env = os.environ.get("ARFL_STATE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "arfl"
