"""A restarted ``active`` replica may start from a peer's checkpoint (``replication.resume``).

An ``active`` replica's results do not depend on where its batches end (docs/design.md §2.4):
its state after the input up to offsets O is the same whichever replica computed it. So a
replica that restarts from its checkpoint can take *any* replica's last committed batch, and the
freshest one replays least. Replicas on real-time mode commit once per interval, staggered by
interval / R (:mod:`arfl.replica.phase`): a replica's own last commit may be up to an interval
old while a peer committed a moment ago. A windowed replica killed 5 s after the survivor's
boundary at a 30-s interval replayed ~20 s of input from its own checkpoint and caught up after
22-35 s, past the survivor's next boundary (docs/benchmarks.md, session 28).

A Spark checkpoint directory holds ``offsets/N`` (the end offsets of batch N: the log's last
line, ``{"topic": {"partition": offset}}``), ``commits/N`` (batch N done; with checkpoint format
v2 it names the state store files of version N+1), ``state/`` (versioned files, never rewritten)
``sources/`` and ``metadata`` (the query id). :func:`copy_committed` copies a running peer's
directory up to its last committed batch: entries beyond it (a boundary in progress) are left
out, as if the peer had crashed right after that commit, which Spark recovers from. Files that
vanish while being copied (old state versions the state store's maintenance deletes) are
skipped; files written meanwhile are new versions Spark does not read for batch N + 1.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

LOGS = ("offsets", "commits")


@dataclass(frozen=True)
class Committed:
    """A checkpoint's last committed batch."""

    path: Path
    batch: int
    offsets: dict[str, dict[str, int]]
    """The batch's end offsets, ``{topic: {partition: offset}}``."""

    @property
    def records(self) -> int:
        """Input records read up to that batch's end, over every partition."""
        return sum(o for parts in self.offsets.values() for o in parts.values())


def _entries(log: Path) -> list[int]:
    """Batch ids of a metadata log's entries (its numbered files), highest first."""
    try:
        names = os.listdir(log)
    except OSError:
        return []
    return sorted((int(n) for n in names if n.isdigit()), reverse=True)


def _end_offsets(entry: Path) -> dict[str, dict[str, int]] | None:
    """The source offsets in an ``offsets/N`` entry (its last line), or None if unreadable or
    not one Kafka source's."""
    try:
        lines = entry.read_text(encoding="utf-8").splitlines()
        parsed = json.loads(lines[-1])
    except (OSError, ValueError, IndexError):
        return None
    if not isinstance(parsed, dict) or len(parsed) != 1:
        return None
    try:
        return {
            str(topic): {str(p): int(o) for p, o in parts.items()}
            for topic, parts in parsed.items()
        }
    except (AttributeError, TypeError, ValueError):
        return None


def last_committed(location: Path) -> Committed | None:
    """The checkpoint's highest batch with both its commit and its offsets readable (None:
    none, or not a single-source checkpoint)."""
    offsets = set(_entries(location / "offsets"))
    for batch in _entries(location / "commits"):
        if batch not in offsets:
            continue
        ends = _end_offsets(location / "offsets" / str(batch))
        if ends is not None:
            return Committed(location, batch, ends)
    return None


def freshest(locations: list[Path]) -> Committed | None:
    """Of these checkpoints, the one whose last committed batch read furthest into the input
    (the first of equals; None if none has a committed batch). Only checkpoints of the same
    topic partitions as the first that has one compete with it."""
    best: Committed | None = None
    for loc in locations:
        got = last_committed(loc)
        if got is None:
            continue
        if best is None or (_partitions(got) == _partitions(best) and got.records > best.records):
            best = got
    return best


def _partitions(c: Committed) -> set[tuple[str, str]]:
    return {(topic, p) for topic, parts in c.offsets.items() for p in parts}


def _beyond(rel: Path, batch: int) -> bool:
    """A log entry (or its ``.N.crc`` / ``.N.<uuid>.tmp``) of a batch after ``batch``, or an
    unfinished write."""
    if len(rel.parts) != 2 or rel.parts[0] not in LOGS:
        return False
    name = rel.parts[1]
    if name.endswith(".tmp") or name.endswith(".tmp.crc"):
        return True
    head = name.lstrip(".").split(".", 1)[0]
    return head.isdigit() and int(head) > batch


def copy_committed(source: Committed, dest: Path, metadata_from: Path | None = None) -> int:
    """Copy checkpoint ``source.path`` up to its committed ``source.batch`` into ``dest`` (which
    must not exist).

    Args:
        metadata_from: a checkpoint whose ``metadata`` (the query id) to keep instead of the
            source's, so that the restarted query keeps its replica's id.

    Returns:
        The number of files copied.
    """
    src = source.path
    dest.mkdir(parents=True)
    copied = 0
    for root, dirs, files in os.walk(src):
        rel_root = Path(root).relative_to(src)
        for d in dirs:
            (dest / rel_root / d).mkdir(exist_ok=True)
        for f in files:
            rel = rel_root / f
            if _beyond(rel, source.batch) or f.endswith(".tmp"):
                continue
            try:
                shutil.copy2(Path(root) / f, dest / rel)
            except FileNotFoundError:
                continue  # deleted meanwhile: an old state version, not part of batch N
            copied += 1
    if metadata_from is not None:
        for name in ("metadata", ".metadata.crc"):
            mine = metadata_from / name
            if mine.is_file():
                shutil.copy2(mine, dest / name)
    return copied
