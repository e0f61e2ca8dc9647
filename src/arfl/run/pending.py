"""``<run dir>/pending-faults.json``: reverts owed, written before a fault is injected and
removed after its revert, so ``arfl chaos recover`` can undo faults whose injector died.

Several processes (deploy's schedule thread, ``arfl chaos`` by hand) may share a run directory:
every read-modify-write holds an exclusive ``flock`` on ``.pending-faults.lock``.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from arfl.errors import FaultError
from arfl.processes import ProcessId, create_time
from arfl.run.rundir import write_json_atomic

PENDING_FILE = "pending-faults.json"


class PendingFaults:
    """The pending-revert list of one run directory."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = run_dir / PENDING_FILE
        self._lock_path = run_dir / ".pending-faults.lock"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self._lock_path, "a+", encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _read(self) -> list[dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return []
        return list(data.get("faults", [])) if isinstance(data, dict) else []

    def _write(self, entries: list[dict[str, Any]]) -> None:
        if entries:
            write_json_atomic(self.path, {"faults": entries})
        else:
            self.path.unlink(missing_ok=True)

    @contextmanager
    def holding(self) -> Iterator[list[dict[str, Any]]]:
        """Every pending entry, with the lock held until the block ends: no entry is added or
        removed meanwhile (what a restarting replica re-applies stays consistent)."""
        with self._locked():
            yield self._read()

    def entries(self) -> list[dict[str, Any]]:
        """Every pending entry."""
        with self._locked():
            return self._read()

    def add(
        self,
        kind: str,
        replica: int | None,
        record: dict[str, Any],
        refuse: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> str:
        """Persist a revert owed; returns its id.

        Args:
            refuse: asked about every entry already pending, under the same lock as the
                write; a reason returned means the new entry must not be added.

        Raises:
            FaultError: ``refuse`` gave a reason (nothing was added).
        """
        me = psutil.Process()
        entry = {
            "id": uuid.uuid4().hex[:12],
            "kind": kind,
            "replica": replica,
            "owner_pid": os.getpid(),
            "owner_create_time": create_time(me),
            "t": round(time.time(), 6),
            "record": record,
        }
        with self._locked():
            entries = self._read()
            for other in entries:
                why = refuse(other) if refuse is not None else None
                if why:
                    raise FaultError(why)
            entries.append(entry)
            self._write(entries)
        return str(entry["id"])

    def remove(self, entry_id: str) -> None:
        """Drop an entry once its revert is done."""
        with self._locked():
            self._write([e for e in self._read() if e.get("id") != entry_id])


def injector_alive(entry: dict[str, Any]) -> bool:
    """True when the process that injected ``entry`` still runs (it will revert by itself)."""
    try:
        owner = ProcessId(int(entry["owner_pid"]), float(entry["owner_create_time"]))
    except (KeyError, ValueError, TypeError):
        return False
    return owner.alive()
