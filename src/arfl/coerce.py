"""Optional numbers and strings read back from JSON (``state.json``, summaries, journals).

Two strictnesses, because the readers differ: ``opt_*`` keep ``None`` and convert anything else,
raising on a value of the wrong kind (the file is arfl's own and a bad value is a bug);
``try_*`` turn a value that does not convert into ``None`` too (reports over whatever a run
left behind, where one odd field must not hide the rest).
"""

from __future__ import annotations

from typing import Any


def opt_int(v: Any) -> int | None:
    """``None`` for ``None``, else ``int(v)``.

    Raises:
        ValueError, TypeError: ``v`` does not convert.
    """
    return None if v is None else int(v)


def opt_float(v: Any) -> float | None:
    """``None`` for ``None``, else ``float(v)``.

    Raises:
        ValueError, TypeError: ``v`` does not convert.
    """
    return None if v is None else float(v)


def opt_str(v: Any) -> str | None:
    """``None`` for ``None``, else ``str(v)``."""
    return None if v is None else str(v)


def try_int(v: Any) -> int | None:
    """``int(v)``, or ``None`` when ``v`` is ``None`` or does not convert."""
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError):
        return None


def try_float(v: Any) -> float | None:
    """``float(v)``, or ``None`` when ``v`` is ``None`` or does not convert."""
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None
