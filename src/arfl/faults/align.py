"""Placing a fault after a batch boundary (``[[chaos]] after_boundary``, ``arfl chaos inject
--after-boundary``).

A replica's output stalls for a moment at each of its batch boundaries (on real-time mode, every
``trigger_interval``: Spark commits the long batch and plans the next; docs/design.md §2.1). With
two replicas the other covers that stall; with one of them killed, a boundary of the survivor's
that falls while the newcomer catches up shows in the output, and in the fault's verdict. A
fault placed a few seconds after a survivor's boundary has the most time before the next one;
one placed right after a checkpoint (passive) replays the least. Which one an experiment wants
is the user's choice: this module only finds the boundary.

A boundary is where a batch ends: its progress line (``progress/replica-N.jsonl``, written by the
replica when the batch ends) gives the time, :func:`arfl.run.progress.batch_ends`. The first
line appended after the wait began counts, whatever the batch.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from arfl.run.progress import batch_ends

WAIT_MAX_S = 120.0
"""How long a fault waits for a boundary before it fails (not injected): real-time mode's
longest usual ``trigger_interval`` is a minute; a micro-batch replica ends batches every few
seconds."""
POLL_S = 0.05
"""How often the progress files are looked at (a boundary is found at most this late)."""


@dataclass(frozen=True)
class Boundary:
    """One batch boundary of one replica."""

    replica: int
    t: float
    """Epoch seconds: when the batch ended (the batch's start plus its duration)."""


def watched_replicas(replicas: Sequence[int], target: int | Literal["leader"] | None) -> list[int]:
    """Whose boundaries a fault aimed at ``target`` waits for: every other replica's (the
    survivors' whose stall the fault would uncover); the replica's own when it is the only one;
    every replica's when the fault names none (or ``leader``, resolved only when injected)."""
    if isinstance(target, int):
        others = [r for r in replicas if r != target]
        return others or [target]
    return list(replicas)


class _Tail:
    """The complete lines appended to one file since it was opened."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def new_lines(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        lines: list[dict[str, Any]] = []
        for raw in data[: end + 1].splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue  # not a progress line: skipped (the replica writes whole lines)
            if isinstance(line, dict):
                lines.append(line)
        return lines


def next_boundary(
    progress_file: Callable[[int], Path],
    replicas: Sequence[int],
    stop: threading.Event,
    timeout_s: float | None = None,
) -> Boundary | None:
    """The first batch boundary any of ``replicas`` reports from now on.

    Args:
        progress_file: a replica's progress file (:meth:`arfl.run.rundir.RunPaths.progress`).
        replicas: whose boundaries count.
        stop: ends the wait early (returns None).
        timeout_s: longest wait (returns None); :data:`WAIT_MAX_S` if not given.
    """
    tails = {r: _Tail(progress_file(r)) for r in replicas}
    deadline = time.monotonic() + (WAIT_MAX_S if timeout_s is None else timeout_s)
    while True:
        for r, tail in tails.items():
            ends = batch_ends(tail.new_lines())
            if ends:
                return Boundary(r, ends[-1])
        if time.monotonic() >= deadline or stop.wait(POLL_S):
            return None
