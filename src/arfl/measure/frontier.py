"""The output frontier: per input partition, an offset below which every result is delivered.

A restarted replica of a stateless ``active`` pipeline need not replay from its checkpoint: a
record's result depends on that record only, so any input offset whose result some replica
already delivered needs no second copy (``replication.resume``, :mod:`arfl.orchestrate.supervisor`).
This module says from where it may start instead.

Per-record results are identified by ``"<partition>:<offset>"``. A replica processes an input
partition in offset order and its (idempotent) producer keeps order within each output
partition. So if the merger has read, on output partition q of replica r, a result of input
offset o, then every result of r's for input partition p with an offset below o that r sent to
q was delivered before it. Over all of r's output partitions: every result of r's with an
offset below ``min_q max_offset[r][p][q]`` is delivered (a result goes to one q, whose max is at
least that min). This holds across a replica's restarts (each incarnation orders its own
writes, and the max only grows). The frontier of p is the largest such bound over all
replicas; an output partition that has no result of p yet leaves that replica without a bound.

Results whose ids are not ``partition:offset`` (window updates) are ignored: only stateless
pipelines resume from the frontier.

The merger keeps a :class:`Frontier` and writes it to ``frontier.json`` in the run directory
(:func:`write_frontier`) a few times a second; the supervisor reads it (:func:`read_frontier`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from arfl.run.rundir import write_json_atomic

FILE_NAME = "frontier.json"
"""In the run directory."""
WRITE_INTERVAL_S = 0.2
"""How often the merger writes the frontier (a restart replays at most about this much more)."""
PER_RECORD_RID = re.compile(r"^(\d+):(\d+)$")
"""A per-record result's id: ``<input partition>:<input offset>``."""


class Frontier:
    """Per replica, input partition and output partition: the highest input offset read."""

    def __init__(self) -> None:
        self._outputs: dict[int, int] = {}
        """Output partitions of each replica's topic."""
        self._max: dict[tuple[int, int], dict[int, int]] = {}
        """(replica, input partition) -> output partition -> highest input offset."""
        self.changed = False

    def set_partitions(self, replica: int, partitions: int) -> None:
        """Replica ``replica``'s topic has ``partitions`` output partitions."""
        self._outputs[replica] = partitions

    def offer(self, replica: int, out_partition: int, rid: str) -> None:
        """A result ``rid`` of ``replica`` was read from its output partition ``out_partition``."""
        m = PER_RECORD_RID.match(rid)
        if m is not None:
            self.offer_at(replica, out_partition, int(m.group(1)), int(m.group(2)))

    def offer_at(self, replica: int, out_partition: int, p: int, o: int) -> None:
        """:meth:`offer` of the result of input offset ``o`` of partition ``p`` (its id already
        read: the merger parses each id once)."""
        per_q = self._max.setdefault((replica, p), {})
        if o > per_q.get(out_partition, -1):
            per_q[out_partition] = o
            self.changed = True

    def passed(self, replica: int, rid: str) -> bool:
        """Whether ``replica`` is past result ``rid`` (``partition:offset``): it delivered every
        result of its own below a bound above that offset, so it delivered this one or never
        will (it resumed at the frontier beyond it). False for other ids, and while some
        output partition of it has no result of that input partition."""
        m = PER_RECORD_RID.match(rid)
        if m is None:
            return False
        bound = self._bound(replica, int(m.group(1)))
        return bound is not None and int(m.group(2)) < bound

    def _bound(self, replica: int, partition: int) -> int | None:
        """The offset of input partition ``partition`` below which every result of
        ``replica``'s is delivered (see the module docstring); None while some output
        partition of it has no result of that input partition."""
        n = self._outputs.get(replica)
        per_q = self._max.get((replica, partition))
        if n is None or per_q is None or len(per_q) < n:
            return None
        return min(per_q.values())

    def safe(self) -> dict[int, int]:
        """Per input partition, an offset below which every result is delivered (partitions
        no replica bounds yet are absent)."""
        out: dict[int, int] = {}
        for replica, p in self._max:
            bound = self._bound(replica, p)
            if bound is not None and bound > out.get(p, -1):
                out[p] = bound
        return out


def path_in(run_dir: Path) -> Path:
    """The frontier file of a run."""
    return run_dir / FILE_NAME


def write_frontier(path: Path, frontier: dict[int, int], now_s: float) -> None:
    """Write ``{"t": now, "offsets": {"<partition>": offset}}`` atomically."""
    write_json_atomic(
        path, {"t": round(now_s, 3), "offsets": {str(p): o for p, o in sorted(frontier.items())}}
    )


def read_frontier(path: Path) -> dict[int, int] | None:
    """The offsets written by :func:`write_frontier` (None: no file or unreadable)."""
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
        offsets = data["offsets"]
        return {int(p): int(o) for p, o in offsets.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
