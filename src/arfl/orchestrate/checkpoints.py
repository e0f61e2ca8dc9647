"""A restarted ``active`` replica may start from a peer's checkpoint (``replication.resume``).

An ``active`` replica's results do not depend on where its batches end (docs/design.md §2.4):
its state after the input up to offsets O is the same whichever replica computed it. So a
replica that restarts from its checkpoint can take *any* replica's last committed batch, and the
freshest one replays least. Replicas on real-time mode commit once per interval, staggered by
interval / R (:mod:`arfl.replica.phase`): a replica's own last commit may be up to an interval
old while a peer committed a moment ago. A windowed replica killed 5 s after the survivor's
boundary at a 30-s interval replayed ~20 s of input from its own checkpoint and caught up after
22-27 s, at or past the survivor's next boundary (docs/benchmarks.md).

A Spark checkpoint directory holds ``offsets/N`` (the end offsets of batch N: the log's last
line, ``{"topic": {"partition": offset}}``), ``commits/N`` (batch N done; with checkpoint format
v2 it names the state store files of version N+1), ``state/<operator>/<partition>/`` (files
of state version V named ``V.delta``, ``V.snapshot``, ``V.zip``, ``V.changelog`` or, format
v2, ``V_<uuid>.changelog``/``.zip``), ``sources/`` and ``metadata`` (the query id).
:func:`copy_committed` copies a running peer's directory up to its last committed batch N:
log entries beyond it (a boundary in progress) and state files of versions beyond N + 1 are
left out, as if the peer had crashed right after that commit, which Spark recovers from (with
format v1 a version's file names carry no uuid: a peer's newer version copied along would
later be read instead of the replica's own). A file that vanishes while being copied (an old
state version the state store's maintenance deletes) is skipped; the copy is then checked: its
last committed batch must be N and, with format v2, every state file ``commits/N`` names must be
there, else :class:`IncompleteCopy`.
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
        """The sum of that batch's end offsets over every partition (how far it read)."""
        return sum(o for parts in self.offsets.values() for o in parts.values())


def _number(name: str) -> int | None:
    """The batch id or state version a checkpoint file is of: its leading digits (after the
    dots of a hidden ``.crc``) ending the name or followed by ``.`` or ``_`` (``3``, ``.3.crc``,
    ``V.delta``, ``.V_<uuid>.changelog.crc``); None for other names."""
    head = name.lstrip(".")
    digits = len(head) - len(head.lstrip("0123456789"))
    if digits == 0 or head[digits : digits + 1] not in ("", ".", "_"):
        return None
    return int(head[:digits])


def _entries(log: Path) -> list[int]:
    """Batch ids of a metadata log's entries (its numbered files), highest first."""
    try:
        names = os.listdir(log)
    except OSError:
        return []
    return sorted((int(n) for n in names if n.isdecimal() and n.isascii()), reverse=True)


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


def freshest(committed: list[Committed | None]) -> Committed | None:
    """Of these checkpoints' last committed batches (:func:`last_committed`), the one that read
    furthest into the input (the first of equals; None if none has one). Only those of the same
    topic partitions as the first compete with it."""
    best: Committed | None = None
    for got in committed:
        if got is None:
            continue
        if best is None or (_partitions(got) == _partitions(best) and got.records > best.records):
            best = got
    return best


def _partitions(c: Committed) -> set[tuple[str, str]]:
    return {(topic, p) for topic, parts in c.offsets.items() for p in parts}


class IncompleteCopy(OSError):
    """A copied checkpoint lacks what its last committed batch needs."""


def _newer_state(rel: Path, batch: int) -> bool:
    """A state store file (``state/<operator>/<partition>/<file>``) of a version after the one
    batch ``batch`` committed (N + 1)."""
    parts = rel.parts
    if len(parts) != 4 or parts[0] != "state" or not parts[2].isdecimal():
        return False
    version = _number(parts[3])
    return version is not None and version > batch + 1


def _state_ids(commit: Path) -> list[tuple[str, str, str]]:
    """(operator, partition, uuid) of every state store file a format-v2 commit entry names
    (``stateUniqueIds``); [] for format v1 or an entry without state."""
    try:
        meta = json.loads(commit.read_text(encoding="utf-8").splitlines()[1])
    except (OSError, ValueError, IndexError):
        raise IncompleteCopy(f"{commit}: unreadable") from None
    ids = meta.get("stateUniqueIds") if isinstance(meta, dict) else None
    if not isinstance(ids, dict):
        return []
    out = []
    for op, partitions in ids.items():
        for p, stores in enumerate(partitions if isinstance(partitions, list) else []):
            for uuid in stores if isinstance(stores, list) else [stores]:
                if isinstance(uuid, str):
                    out.append((str(op), str(p), uuid))
    return out


def _check(source: Committed, dest: Path) -> None:
    """Raise :class:`IncompleteCopy` unless ``dest`` can resume after ``source.batch``."""
    got = last_committed(dest)
    if got is None or got.batch != source.batch or got.offsets != source.offsets:
        raise IncompleteCopy(f"{dest}: its last committed batch is not {source.batch}")
    version = source.batch + 1
    for op, p, uuid in _state_ids(dest / "commits" / str(source.batch)):
        part = dest / "state" / op / p
        if not any(f.name.startswith(f"{version}_{uuid}") for f in part.rglob("*")):
            raise IncompleteCopy(f"{part}: no state version {version} ({uuid})")


def _raise(e: OSError) -> None:
    raise e


def _beyond(rel: Path, batch: int) -> bool:
    """A log entry (or its ``.N.crc``) of a batch after ``batch``."""
    if len(rel.parts) != 2 or rel.parts[0] not in LOGS:
        return False
    n = _number(rel.parts[1])
    return n is not None and n > batch


def _unfinished(name: str) -> bool:
    """A write Spark had not renamed into place yet (``.N.<uuid>.tmp`` and its checksum)."""
    return name.endswith(".tmp") or name.endswith(".tmp.crc")


def copy_committed(source: Committed, dest: Path, metadata_from: Path | None = None) -> int:
    """Copy checkpoint ``source.path`` up to its committed ``source.batch`` into ``dest`` (which
    must not exist).

    Args:
        metadata_from: a checkpoint whose ``metadata`` (the query id) to keep instead of the
            source's, so that the restarted query keeps its replica's id (a new one when it
            has none).

    Returns:
        The number of files copied.

    Raises:
        OSError: a directory could not be read or a file written; :class:`IncompleteCopy` when
            the copy lacks what batch N + 1 needs.
    """
    src = source.path
    dest.mkdir(parents=True)
    copied = 0
    for root, dirs, files in os.walk(src, onerror=_raise):
        rel_root = Path(root).relative_to(src)
        for d in dirs:
            (dest / rel_root / d).mkdir(exist_ok=True)
        for f in files:
            rel = rel_root / f
            if _unfinished(f) or _beyond(rel, source.batch) or _newer_state(rel, source.batch):
                continue
            try:
                shutil.copy2(Path(root) / f, dest / rel)
            except FileNotFoundError:
                continue  # deleted meanwhile: an old state version (checked below)
            copied += 1
    if metadata_from is not None:
        # Both files or neither (a checksum beside another file's metadata fails Hadoop's read);
        # without the replica's own, none: Spark gives the query a new id.
        for name in ("metadata", ".metadata.crc"):
            (dest / name).unlink(missing_ok=True)
            mine = metadata_from / name
            if mine.is_file():
                shutil.copy2(mine, dest / name)
    _check(source, dest)
    return copied
