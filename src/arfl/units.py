"""Parsing of values with units (``"20ms"``, ``"1.5s"``, ``"2m"``)."""

from __future__ import annotations

import re

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m|h)\s*$")
_SCALE = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: object) -> float:
    """Return seconds for a duration string such as ``"250ms"`` or ``"1m"``.

    Raises:
        ValueError: the value is not a string with a unit from us, ms, s, m, h.
    """
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError(
            f'expected a duration string with a unit such as "500ms" or "10s", got {value!r}'
        )
    m = _DURATION.match(value)
    if not m:
        raise ValueError(
            f'bad duration {value!r}: write a number and a unit (us, ms, s, m, h), e.g. "20ms"'
        )
    return float(m.group(1)) * _SCALE[m.group(2)]


def format_duration(seconds: float) -> str:
    """Render seconds compactly (``0.02 -> "20ms"``)."""
    if seconds < 1:
        return f"{round(seconds * 1000, 6):g}ms"
    return f"{round(seconds, 6):g}s"


def percentile_key(p: float) -> str:
    """``50.0 -> "p50"``, ``99.9 -> "p99.9"`` (the name of a percentile everywhere)."""
    return "p" + (str(int(p)) if float(p).is_integer() else repr(float(p)))
