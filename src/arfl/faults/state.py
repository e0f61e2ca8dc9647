"""``state.json`` read for chaos (:class:`arfl.run.state.RunState`), with errors that say what
to do when it is missing or malformed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from arfl.errors import FaultError
from arfl.run.state import STATE_FILE, RunState


def parse_state(raw: dict[str, Any], *, source: str = STATE_FILE) -> RunState:
    """Validate the decoded JSON.

    Raises:
        FaultError: a required key is missing or has the wrong type.
    """
    try:
        return RunState.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise FaultError(
            f"{source}: malformed run state ({where}: {first['msg']}); "
            "is this a run directory written by 'arfl deploy'?"
        ) from e


def load_state(run_dir: Path) -> RunState:
    """Read ``<run_dir>/state.json``.

    Raises:
        FaultError: the file is missing, not JSON, or lacks required keys.
    """
    path = run_dir / STATE_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise FaultError(
            f"{path}: no run state; pass a run directory of a running 'arfl deploy' "
            "(runs/<name>-<timestamp>)"
        ) from e
    except json.JSONDecodeError as e:
        raise FaultError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(raw, dict):
        raise FaultError(f"{path}: expected a JSON object")
    return parse_state(raw, source=str(path))
