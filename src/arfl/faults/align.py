"""Placing a fault after a batch boundary (``[[chaos]] after_boundary``, ``arfl chaos inject
--after-boundary``).

A replica's output stalls for a moment at each of its batch boundaries (on real-time mode, every
``trigger_interval``: Spark commits the long batch and plans the next; docs/design.md §2.1). With
two replicas the other covers that stall; with one of them killed, a boundary of the survivor's
that falls while the newcomer catches up shows in the output, and in the fault's verdict. A
fault placed a few seconds after a survivor's boundary has the most time before the next one;
one placed right after a checkpoint (passive) replays the least. Which one an experiment wants
is the user's choice: this module only finds the boundary.

A boundary is where a batch ends: its progress line (``progress/replica-N.jsonl``) gives the time,
:func:`arfl.run.progress.batch_ends` (start plus duration). A real-time replica appends that line
only once the next batch runs, after the boundary's stall (0.7-2.8 s after the batch's end in
the demo's runs, docs/benchmarks.md), so the wait is measured from the batch's end, not from the
reading. The first line appended after the wait began counts (of several read at once, the
earliest end), whatever the batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from arfl.processes import wait_until
from arfl.run.progress import batch_ends
from arfl.run.streams import JsonlTail

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


def watched_replicas(
    replicas: Sequence[int],
    target: int | Literal["leader"] | None,
    *,
    leader: int | None = None,
    peers: Collection[int] = (),
) -> list[int]:
    """Whose boundaries a fault waits for: every replica it does not hit (the survivors, whose
    stall the fault would uncover). It hits ``target`` (``"leader"``: ``leader``, the current
    one) and the ``peers`` a partition cuts it from. When that leaves none (a lone replica), the
    replicas it hits; a fault aimed at no replica (or at a leader not known) waits for any."""
    victim = leader if target == "leader" else target
    hit = set(peers) | ({victim} if isinstance(victim, int) else set())
    if not hit:
        return list(replicas)
    others = [r for r in replicas if r not in hit]
    return others or [r for r in replicas if r in hit] or list(replicas)


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
    tails = {r: JsonlTail(progress_file(r), from_end=True) for r in replicas}

    def seen() -> Boundary | None:
        found = [
            Boundary(r, ends[0])
            for r, tail in tails.items()
            if (ends := batch_ends(tail.read_new()))
        ]
        return min(found, key=lambda b: b.t) if found else None

    try:
        return wait_until(
            seen,
            timeout_s=WAIT_MAX_S if timeout_s is None else timeout_s,
            interval_s=POLL_S,
            stop=stop,
        )
    except TimeoutError:  # Stopped too
        return None
