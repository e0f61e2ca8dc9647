"""The run directory every deploy writes, and its journal.

Layout (a stable contract for ``arfl report`` and ``arfl chaos``)::

    runs/<name>-<YYYYmmdd-HHMMSS>/
      spec.toml            the spec as given
      spec.json            the resolved spec (defaults filled in)
      state.json           live state: pids, app ids, stack addresses (for ``arfl chaos``)
      journal.jsonl        one JSON object per event: {"t": epoch_s, "event": ..., ...}
      latency.hlog         HdrHistogram interval log (standard format), end-to-end latency in us
                           from each result's intended send time (the headline)
      latency-sent.hlog    the same from the actual send time (``sent_ts``; wrk2's uncorrected)
      check.json           the independent check of the final output (no Spark)
      monitor.jsonl        per-second stats from the merger (rates, percentiles, gap, lag)
      progress/replica-N.jsonl   Spark StreamingQueryProgress JSON, one line per batch
      logs/<component>.log stdout/stderr of every process arfl started
      summary.json         counts and overall percentiles, written at the end
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from arfl.run.events import Event


def new_run_dir(root: Path, name: str) -> Path:
    """Create ``root/<name>-<timestamp>`` (with a suffix if it exists) and its sub-folders."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = root / f"{name}-{stamp}"
    n = 1
    while path.exists():
        n += 1
        path = root / f"{name}-{stamp}-{n}"
    for sub in ("progress", "logs"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    return path


class Journal:
    """Append-only JSONL event log; safe to call from several threads.

    Each line: ``{"t": <epoch seconds>, "event": "<name>", ...fields}``.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, event: Event, **fields: Any) -> dict[str, Any]:
        """Append one event (:mod:`arfl.run.events`) stamped with the wall clock; returns the
        record written."""
        rec: dict[str, Any] = {"t": round(time.time(), 6), "event": str(event), **fields}
        line = json.dumps(rec, sort_keys=False, default=str)
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
        return rec

    def read(self) -> list[dict[str, Any]]:
        """Every event so far (a torn last line is skipped)."""
        return read_jsonl(self.path)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Parse a JSONL file, skipping blank and torn lines."""
    if not path.exists():
        return []
    out: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def read_journal(path: Path) -> tuple[list[dict[str, Any]], str | None]:
    """Parse a journal strictly: every whole line must be a JSON object.

    Returns:
        The events, and a note when the last line is torn (no newline: its writer was killed
        mid-line), which is left out.

    Raises:
        ValueError: a whole line that is not a JSON object, naming the file and line.
    """
    if not path.exists():
        return [], None
    out: list[dict[str, Any]] = []
    torn = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError as e:
                if not line.endswith("\n"):
                    torn = f"{path}:{n}: its last line is torn (the writer was killed): left out"
                    continue
                raise ValueError(f"{path}:{n}: not JSON ({e.msg}): {line.strip()[:80]!r}") from e
            if not isinstance(event, dict):
                raise ValueError(f"{path}:{n}: not a JSON object: {line.strip()[:80]!r}")
            out.append(event)
    return out, torn


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` via a temp file and rename, so readers never see half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


@dataclass(frozen=True)
class RunPaths:
    """Named paths inside a run directory."""

    root: Path

    @property
    def journal(self) -> Path:
        return self.root / "journal.jsonl"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def hlog(self) -> Path:
        return self.root / "latency.hlog"

    @property
    def check(self) -> Path:
        """The independent check of the final output (``arfl.measure.check``)."""
        return self.root / "check.json"

    @property
    def hlog_sent(self) -> Path:
        """Latency from the actual send time (``sent_ts``), same format as :attr:`hlog`."""
        return self.root / "latency-sent.hlog"

    @property
    def monitor(self) -> Path:
        return self.root / "monitor.jsonl"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    def progress(self, replica: int) -> Path:
        return self.root / "progress" / f"replica-{replica}.jsonl"

    def control(self, replica: int) -> Path:
        """Where replica ``replica``'s driver answers requests (:mod:`arfl.replica.control`)."""
        return self.root / "control" / f"replica-{replica}"

    def log(self, component: str) -> Path:
        return self.root / "logs" / f"{component}.log"

    def child_config(self, component: str) -> Path:
        """The config a child process reads (``merger``, ``injector``, ``replayer``:
        :mod:`arfl.run.childconfig`)."""
        return self.root / "config" / f"{component}.json"
