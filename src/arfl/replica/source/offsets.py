"""Source offsets: which batch a position closes, and where it is in every partition.

Spark writes whatever ``latestOffset()`` returns to the query's offset log as JSON and compares
offsets by that JSON, so the encoding here is canonical: partitions in ascending order, keys as
strings (JSON has no integer keys)::

    {"batch": 17, "offsets": {"0": 1200, "1": 1187}}

``batch`` is mode-specific and is what lets a restarted driver continue the *same* sequence of
batches: the epoch index of the cut (active-leaderless), the decision number ``k``
(active-leader) or a plain counter. ``-1`` marks a start position that closes no batch (the
topic's beginning or a user-given start).

Where the reader applies the agreed watermark (:mod:`arfl.replica.source.late`, windowed
pipelines in the agreed-batch modes) an end also carries ``event_max``, the newest event time
(ms) of every record before it (null: none yet), and ``groups``: where the second, third, ...
agreed batch inside a batch that merged several begins, each with the ``event_max`` before it::

    {"batch": 21, "offsets": {...}, "event_max": 1764230401250,
     "groups": [{"offsets": {"0": 1100, "1": 1090}, "event_max": 1764230399800}]}

Both are functions of the log alone, so every replica's offset log agrees on them, and a
restarted driver continues from the checkpoint's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NO_BATCH = -1
"""``batch`` of a start position that is not the end of any batch."""


@dataclass(frozen=True, slots=True)
class BatchOffset:
    """A position in every partition of the input topic, and the batch that ends there.

    Attributes:
        batch: the batch (epoch, decision) this position closes; :data:`NO_BATCH` for a start.
        offsets: partition -> the next offset to read (exclusive end of what came before).
    """

    batch: int
    offsets: Mapping[int, int] = field(default_factory=dict)
    tracked: bool = False
    """True when this position carries :attr:`event_max` (the agreed watermark is on)."""
    event_max: int | None = None
    """Newest event time (ms) of every record before this position; None: no event yet."""
    groups: tuple[AgreedGroup, ...] = ()
    """Agreed batches after the first inside the batch that ends here (merged catch-up)."""

    def to_dict(self) -> dict[str, Any]:
        """The canonical dict Spark serialises into its offset log."""
        out: dict[str, Any] = {"batch": self.batch, "offsets": _offsets(self.offsets)}
        if self.tracked:
            out["event_max"] = self.event_max
            if self.groups:
                out["groups"] = [g.to_dict() for g in self.groups]
        return out

    def to_json(self) -> str:
        """Canonical JSON of :meth:`to_dict`."""
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BatchOffset:
        """Parse what :meth:`to_dict` produced (as handed back by Spark).

        Raises:
            ValueError: the dict is not a source offset of this format.
        """
        try:
            batch = int(data["batch"])
            raw = data["offsets"]
            if not isinstance(raw, Mapping):
                raise TypeError("offsets is not an object")
            offsets = {int(p): int(o) for p, o in raw.items()}
            tracked = "event_max" in data
            event_max = _optional_int(data.get("event_max"))
            groups = tuple(
                AgreedGroup(
                    {int(p): int(o) for p, o in g["offsets"].items()},
                    _optional_int(g.get("event_max")),
                )
                for g in data.get("groups") or ()
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(
                f"not an arfl source offset ({e}): {json.dumps(data)[:200]}; was the checkpoint "
                "written by another source? Use a fresh checkpoint directory"
            ) from None
        return cls(batch, offsets, tracked, event_max, groups)

    @classmethod
    def from_json(cls, text: str) -> BatchOffset:
        """Parse :meth:`to_json` output.

        Raises:
            ValueError: not JSON, or not a source offset.
        """
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"not an arfl source offset: {text[:200]}")
        return cls.from_dict(data)

    def same_position(self, other: BatchOffset) -> bool:
        """True when both name the same offset in every partition (whatever their batch)."""
        return dict(self.offsets) == dict(other.offsets)

    def records_until(self, end: BatchOffset) -> int:
        """Number of log positions between this start and ``end`` (markers included)."""
        return sum(max(0, end.offsets.get(p, o) - o) for p, o in self.offsets.items())


@dataclass(frozen=True, slots=True)
class AgreedGroup:
    """Where one agreed batch begins inside a merged batch, and the newest event time before it.

    Attributes:
        offsets: partition -> the group's first offset.
        event_max: newest event time (ms) of every record before ``offsets``; None: none yet.
    """

    offsets: Mapping[int, int]
    event_max: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Canonical dict (as in an end offset's ``groups``)."""
        return {"offsets": _offsets(self.offsets), "event_max": self.event_max}


def _offsets(offsets: Mapping[int, int]) -> dict[str, int]:
    return {str(p): int(offsets[p]) for p in sorted(offsets)}


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def parse_partition_offsets(text: str) -> dict[int, int]:
    """Parse a user-given start ``{"0": 12, "1": 0}`` (partition -> offset).

    Raises:
        ValueError: not a JSON object of integers.
    """
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError("not an object")
        return {int(p): int(o) for p, o in data.items()}
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"bad start offsets {text[:200]!r} ({e}): expected a JSON object like "
            '{"0": 12, "1": 0} (partition -> offset)'
        ) from None
